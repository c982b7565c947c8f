//go:build !linux

package sandbox

import "io/fs"

func fileUID(fi fs.FileInfo) (int, bool) { return 0, false }

// Started does nothing: there is no contained start here.
func (s *Spec) Started() {}

// CloseStatus does nothing: there is no contained start here.
func (s *Spec) CloseStatus() {}

// ExitErr is err: there is no init here.
func (s *Spec) ExitErr(err error) error { return err }
