package host

import (
	"reflect"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/upstream"
)

// serverStatus copies upstream.Status field by field; a field added there
// must be added to ServerStatus (and copied) too.
func TestServerStatusCoversUpstreamStatus(t *testing.T) {
	up := reflect.TypeOf(upstream.Status{})
	pub := reflect.TypeOf(ServerStatus{})
	var h Host
	sample := reflect.New(up).Elem()
	for i := 0; i < up.NumField(); i++ {
		f := up.Field(i)
		pf, ok := pub.FieldByName(f.Name)
		if !ok || pf.Type != f.Type {
			t.Errorf("ServerStatus lacks %s %s", f.Name, f.Type)
			continue
		}
		// A non-zero value in each field must come through.
		v := sample.Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Int, reflect.Int64:
			v.SetInt(7)
		case reflect.Uint64:
			v.SetUint(7)
		}
	}
	got := reflect.ValueOf(h.serverStatus(sample.Interface().(upstream.Status)))
	for i := 0; i < up.NumField(); i++ {
		name := up.Field(i).Name
		if !reflect.DeepEqual(got.FieldByName(name).Interface(), sample.Field(i).Interface()) {
			t.Errorf("serverStatus drops %s", name)
		}
	}
}
