package registry

// Republish hands the sink one exposed tool, prompt, resource and
// template again, unchanged: the gateway re-registers them, which sends
// every client list_changed for each kind. The host calls it when the
// policies change, since what each client may see changed although the
// exposure did not. It holds r.mu, so it cannot re-add an item a
// concurrent change is removing.
func (r *Registry) Republish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.snap.Load()
	var ch Changes
	if len(s.toolList) > 0 {
		ch.AddTools = s.toolList[:1]
	}
	if p := sortedValues(s.prompts); len(p) > 0 {
		ch.AddPrompts = p[:1]
	}
	if rs := sortedValues(s.resources); len(rs) > 0 {
		ch.AddResources = rs[:1]
	}
	if ts := sortedValues(s.templates); len(ts) > 0 {
		ch.AddTemplates = ts[:1]
	}
	if r.sink != nil && !ch.Empty() {
		r.sink.Apply(ch)
	}
}
