package recovery_test

import "context"

func contextCanceled() error { return context.Canceled }
