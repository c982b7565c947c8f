// Package deploy_test checks the deployment examples as far as this machine
// allows. Nothing here can download a schema or run a container engine, so:
//
//   - Kubernetes manifests are decoded strictly (unknown fields are errors)
//     into the k8s.io/api types, and checked for what docs/scale-out.md
//     promises (probes, grace period covering the drain, PDB selector);
//   - the Nomad job is parsed with the HCL library and its block structure
//     checked; the mcpvisor configs embedded in both are parsed and
//     validated by mcpvisor's own config package;
//   - HAProxy configurations are checked with `haproxy -c` when haproxy is
//     installed (`make test` installs it);
//   - the Dockerfile is only linted for its essentials: there is no docker
//     engine here to build it.
//
// The example haproxy.cfg itself is run by host/scaleout.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/mcpvisor/mcpvisor/host/config"
)

// overhead is what an orchestrator's kill timeout must allow beyond the
// drain: the wait for calls in flight (20 s) and stopping the servers.
const overhead = 30 * time.Second

// decodeStrict decodes one YAML document into v, failing on any field the
// type does not have (a typo such as "readinesProbe" would otherwise be
// dropped silently, as kubectl apply --validate=false would).
func decodeStrict(doc []byte, v any) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// documents splits a multi-document YAML file.
func documents(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// manifests are the objects of the Kubernetes examples, by kind and name.
type manifests struct {
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    map[string]*corev1.Service
	deployments map[string]*appsv1.Deployment
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{},
	}
	files, _ := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests in kubernetes/")
	}
	for _, f := range files {
		for i, doc := range documents(t, f) {
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			var obj any
			var name func() string
			switch head.APIVersion + " " + head.Kind {
			case "v1 ConfigMap":
				o := &corev1.ConfigMap{}
				obj, name = o, func() string { m.configMaps[o.Name] = o; return o.Name }
			case "v1 Secret":
				o := &corev1.Secret{}
				obj, name = o, func() string { m.secrets[o.Name] = o; return o.Name }
			case "v1 Service":
				o := &corev1.Service{}
				obj, name = o, func() string { m.services[o.Name] = o; return o.Name }
			case "apps/v1 Deployment":
				o := &appsv1.Deployment{}
				obj, name = o, func() string { m.deployments[o.Name] = o; return o.Name }
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				obj, name = o, func() string { m.pdbs[o.Name] = o; return o.Name }
			default:
				t.Fatalf("%s document %d: %s %s is not a kind this test knows; add it", f, i+1, head.APIVersion, head.Kind)
			}
			if err := decodeStrict(doc, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i+1, head.Kind, err)
				continue
			}
			if name() == "" {
				t.Errorf("%s document %d (%s) has no metadata.name", f, i+1, head.Kind)
			}
		}
	}
	return m
}

// A typo in a manifest is caught: the strict decode is what the other
// tests rely on.
func TestDecodeStrictRejectsUnknownFields(t *testing.T) {
	doc := []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  selectr: {}\n")
	if err := decodeStrict(doc, &corev1.Service{}); err == nil || !strings.Contains(err.Error(), "selectr") {
		t.Fatalf("decodeStrict accepted an unknown field: %v", err)
	}
}

func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	dep := m.deployments["mcpvisor"]
	if dep == nil {
		t.Fatal("no Deployment mcpvisor")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas < 2 {
		t.Errorf("Deployment mcpvisor: replicas %v, want 2 or more", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template
	sel, err := metaSelector(dep.Spec.Selector.MatchLabels)
	if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
		t.Errorf("Deployment mcpvisor: selector does not match its pod labels")
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("Deployment mcpvisor: pods must run as non-root (securityContext.runAsNonRoot)")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("Deployment mcpvisor: %d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want httpGet /healthz", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe %+v, want httpGet /readyz", p)
	}

	// The config is valid for mcpvisor, and the grace period covers its drain.
	cm := m.configMaps["mcpvisor-config"]
	if cm == nil {
		t.Fatal("no ConfigMap mcpvisor-config")
	}
	secret := m.secrets["mcpvisor-tokens"]
	if secret == nil {
		t.Fatal("no Secret mcpvisor-tokens")
	}
	for k, v := range secret.StringData {
		t.Setenv(k, v)
	}
	cfg, err := config.Parse([]byte(cm.Data["config.hcl"]), "/etc/mcpvisor/config.hcl")
	if err != nil {
		t.Fatalf("ConfigMap mcpvisor-config: config.hcl: %v", err)
	}
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if pod.Spec.TerminationGracePeriodSeconds == nil || grace < cfg.Host.Drain+overhead {
		t.Errorf("terminationGracePeriodSeconds %s < drain %s + %s", grace, cfg.Host.Drain, overhead)
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && filepath.Join(vm.MountPath, "config.hcl") == c.Args[len(c.Args)-1] {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the container's -config %q is not the mounted ConfigMap's config.hcl", c.Args)
	}
	envFromSecret := false
	for _, e := range c.EnvFrom {
		envFromSecret = envFromSecret || (e.SecretRef != nil && e.SecretRef.Name == secret.Name)
	}
	if !envFromSecret {
		t.Error("the container does not take its tokens from the Secret")
	}

	for _, name := range []string{"mcpvisor", "mcpvisor-pods"} {
		svc := m.services[name]
		if svc == nil {
			t.Errorf("no Service %s", name)
			continue
		}
		if sel, _ := metaSelector(svc.Spec.Selector); !sel.Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service %s does not select the mcpvisor pods", name)
		}
	}
	if svc := m.services["mcpvisor-pods"]; svc != nil && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Error("Service mcpvisor-pods must be headless: the affinity proxies balance over pods")
	}
	pdb := m.pdbs["mcpvisor"]
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget mcpvisor")
	}
	if sel, _ := metaSelector(pdb.Spec.Selector.MatchLabels); !sel.Matches(labels.Set(pod.Labels)) {
		t.Error("PodDisruptionBudget mcpvisor does not select the mcpvisor pods")
	}

	// The two affinity options.
	if m.deployments["mcpvisor-haproxy"] == nil || m.deployments["mcpvisor-envoy"] == nil {
		t.Error("missing an affinity option: Deployments mcpvisor-haproxy and mcpvisor-envoy")
	}
	if cm := m.configMaps["mcpvisor-haproxy"]; cm == nil {
		t.Error("no ConfigMap mcpvisor-haproxy")
	} else {
		cfg := cm.Data["haproxy.cfg"]
		for _, want := range []string{"stick store-response res.hdr(mcp-session-id)", "stick match req.hdr(mcp-session-id)", "uri /readyz", "retry-on conn-failure"} {
			if !strings.Contains(cfg, want) {
				t.Errorf("haproxy.cfg in ConfigMap mcpvisor-haproxy lacks %q", want)
			}
		}
		haproxyCheck(t, "ConfigMap mcpvisor-haproxy", cfg)
	}
	if cm := m.configMaps["mcpvisor-envoy"]; cm == nil {
		t.Error("no ConfigMap mcpvisor-envoy")
	} else {
		var envoy map[string]any
		if err := yaml.Unmarshal([]byte(cm.Data["envoy.yaml"]), &envoy); err != nil {
			t.Errorf("envoy.yaml: %v", err)
		}
		for _, want := range []string{"envoy.http.stateful_session.envelope", "name: mcp-session-id", "path: /readyz"} {
			if !strings.Contains(cm.Data["envoy.yaml"], want) {
				t.Errorf("envoy.yaml lacks %q", want)
			}
		}
	}
}

func metaSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

// haproxyCheck runs `haproxy -c` on cfg when haproxy is installed.
func haproxyCheck(t *testing.T, what, cfg string) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/haproxy"); err != nil {
			if os.Getenv("MCPVISOR_E2E") != "" {
				t.Errorf("%s: haproxy is not installed (make system-tools, or apt-get install haproxy)", what)
			} else {
				t.Logf("%s: haproxy not installed; configuration not checked", what)
			}
			return
		}
		bin = "/usr/sbin/haproxy"
	}
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", "-f", path)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: haproxy -c: %v\n%s", what, err, out)
	}
}

func TestHAProxyExampleChecks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("haproxy", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	haproxyCheck(t, "haproxy/haproxy.cfg", string(b))
}

// The Nomad job parses with the HCL library and has the structure the docs
// promise; its config template is a valid mcpvisor configuration.
func TestNomadJob(t *testing.T) {
	p := hclparse.NewParser()
	f, diags := p.ParseHCLFile(filepath.Join("nomad", "mcpvisor.nomad.hcl"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	job := single(t, f.Body, "job", []string{"name"}, "job")
	groups := blocksOf(t, job.Body, "group", []string{"name"}, "job")
	byName := map[string]*hcl.Block{}
	for _, g := range groups {
		byName[g.Labels[0]] = g
	}
	g := byName["mcpvisor"]
	if g == nil || byName["haproxy"] == nil {
		t.Fatalf("job groups %v, want mcpvisor and haproxy", byName)
	}
	if n := intAttr(t, g.Body, "count"); n < 2 {
		t.Errorf("group mcpvisor: count %d, want 2 or more", n)
	}
	svc := single(t, g.Body, "service", nil, "group mcpvisor")
	paths := map[string]bool{}
	for _, chk := range blocksOf(t, svc.Body, "check", nil, "service") {
		paths[strAttr(t, chk.Body, "path")] = true
	}
	if !paths["/healthz"] || !paths["/readyz"] {
		t.Errorf("service checks on %v, want /healthz and /readyz", paths)
	}
	task := single(t, g.Body, "task", []string{"name"}, "group mcpvisor")
	killTimeout, err := time.ParseDuration(strAttr(t, task.Body, "kill_timeout"))
	if err != nil {
		t.Fatal(err)
	}
	var cfgTemplate string
	for _, tpl := range blocksOf(t, task.Body, "template", nil, "task") {
		if strAttr(t, tpl.Body, "destination") == "local/config.hcl" {
			cfgTemplate = strAttr(t, tpl.Body, "data")
		}
	}
	if cfgTemplate == "" {
		t.Fatal("no template rendering local/config.hcl")
	}
	// What consul-template would render, with a made-up service address.
	rendered := strings.NewReplacer("{{ .Address }}", "10.0.0.7", "{{ .Port }}", "8080").Replace(cfgTemplate)
	rendered = regexp.MustCompile(`\{\{[^}]*\}\}`).ReplaceAllString(rendered, "")
	t.Setenv("NOMAD_ALLOC_NAME", "mcpvisor.mcpvisor[0]")
	t.Setenv("MCPVISOR_TOKEN", "t")
	t.Setenv("TOOLS_TOKEN", "t")
	cfg, err := config.Parse([]byte(rendered), "/local/config.hcl")
	if err != nil {
		t.Fatalf("the rendered config.hcl is invalid: %v\n%s", err, rendered)
	}
	if killTimeout < cfg.Host.Drain+overhead {
		t.Errorf("kill_timeout %s < drain %s + %s", killTimeout, cfg.Host.Drain, overhead)
	}
	if cfg.Host.Replica != "mcpvisor.mcpvisor[0]" {
		t.Errorf("replica %q, want the allocation name", cfg.Host.Replica)
	}
}

// blocksOf returns the blocks of type typ in body, failing on anything it
// cannot read; other content is ignored.
func blocksOf(t *testing.T, body hcl.Body, typ string, labelNames []string, where string) []*hcl.Block {
	t.Helper()
	content, _, diags := body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: typ, LabelNames: labelNames}}})
	if diags.HasErrors() {
		t.Fatalf("%s: %v", where, diags)
	}
	return content.Blocks.OfType(typ)
}

func single(t *testing.T, body hcl.Body, typ string, labelNames []string, where string) *hcl.Block {
	t.Helper()
	bs := blocksOf(t, body, typ, labelNames, where)
	if len(bs) != 1 {
		t.Fatalf("%s: %d %s blocks, want 1", where, len(bs), typ)
	}
	return bs[0]
}

func attr(t *testing.T, body hcl.Body, name string) hcl.Expression {
	t.Helper()
	content, _, diags := body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: name, Required: true}}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return content.Attributes[name].Expr
}

func strAttr(t *testing.T, body hcl.Body, name string) string {
	t.Helper()
	v, diags := attr(t, body, name).Value(nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	return v.AsString()
}

func intAttr(t *testing.T, body hcl.Body, name string) int {
	t.Helper()
	v, diags := attr(t, body, name).Value(nil)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	n, _ := v.AsBigFloat().Int64()
	return int(n)
}

// The Dockerfile cannot be built here (no container engine); its
// essentials are checked instead.
func TestDockerfileEssentials(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages []string // FROM lines
	var lastUser string
	var final []string // instructions of the last stage
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		instr := strings.ToUpper(strings.Fields(l)[0])
		switch instr {
		case "FROM":
			stages = append(stages, l)
			final, lastUser = nil, ""
		case "USER":
			lastUser = strings.Fields(l)[1]
		}
		final = append(final, l)
	}
	if len(stages) < 2 || !regexp.MustCompile(`(?i)^FROM\s+\S+\s+AS\s+build$`).MatchString(stages[0]) {
		t.Errorf("want a multi-stage build starting FROM … AS build; stages: %q", stages)
	}
	if lastUser == "" || lastUser == "root" || strings.HasPrefix(lastUser, "0:") || lastUser == "0" {
		t.Errorf("the final stage runs as %q; want a non-root USER", lastUser)
	}
	text := strings.Join(final, "\n")
	for _, want := range []string{"COPY --from=build", "ENTRYPOINT", "/etc/mcpvisor/config.hcl", "/opt/mcpvisor/plugins"} {
		if !strings.Contains(text, want) {
			t.Errorf("the final stage lacks %q", want)
		}
	}
	if !strings.Contains(string(b), "CGO_ENABLED=0") {
		t.Error("the binary is not built static (CGO_ENABLED=0)")
	}
}
