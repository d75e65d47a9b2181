package main

import "testing"

// TestStageApp: under each stage binary's name mempo is that stage; under its own name,
// or any other, it is the tools.
func TestStageApp(t *testing.T) {
	for _, name := range []string{"mempo-rollout", "mempo-score", "mempo-logprob", "mempo-advantage", "mempo-update"} {
		a := stageApp(name)
		if a == nil {
			t.Errorf("stageApp(%q) = nil, want that stage's app", name)
			continue
		}
		if a.Name != name {
			t.Errorf("stageApp(%q).Name = %q", name, a.Name)
		}
	}
	for _, name := range []string{"mempo", "mempo-foo", "", "rollout", "mempo-rollout.sh"} {
		if a := stageApp(name); a != nil {
			t.Errorf("stageApp(%q) = app %q, want nil", name, a.Name)
		}
	}
}
