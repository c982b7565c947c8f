package host

import (
	"reflect"
	"testing"
)

// serverStatus completes a supervisor's status; every field the
// supervisor fills must come through unchanged.
func TestServerStatusKeepsSupervisorFields(t *testing.T) {
	// The fields the host fills itself.
	hostOwned := map[string]bool{
		"CatalogTruncated": true, "ExposedTools": true,
		"Calls": true, "Errors": true, "LastCallError": true, "LastCallErrorAt": true,
	}
	typ := reflect.TypeOf(ServerStatus{})
	var h Host
	sample := reflect.New(typ).Elem()
	for i := 0; i < typ.NumField(); i++ {
		if hostOwned[typ.Field(i).Name] {
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
	got := reflect.ValueOf(h.serverStatus(sample.Interface().(ServerStatus)))
	for i := 0; i < typ.NumField(); i++ {
		name := typ.Field(i).Name
		if hostOwned[name] {
			continue
		}
		if !reflect.DeepEqual(got.FieldByName(name).Interface(), sample.Field(i).Interface()) {
			t.Errorf("serverStatus drops %s", name)
		}
	}
	if !got.FieldByName("CatalogTruncated").Bool() {
		t.Error("serverStatus does not set CatalogTruncated from CatalogTruncatedReason")
	}
}
