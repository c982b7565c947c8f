package secrets

import "io/fs"

// private does nothing on Windows: the store's directory is the user's
// own %LocalAppData%, protected by its ACL (and the keyring is normally
// used there).
func private(string, fs.FileInfo) error { return nil }
