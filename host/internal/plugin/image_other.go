//go:build !linux

package plugin

import (
	"errors"
	"os"
)

var errNoMemfd = errors.New("no memfd image")

func errFallback(err error) bool { return errors.Is(err, errNoMemfd) }

// sealedImage is Linux only; elsewhere verifiedImage makes a private copy.
func sealedImage(*os.File, string, string) (*image, error) { return nil, errNoMemfd }
