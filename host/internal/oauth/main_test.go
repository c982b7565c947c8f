package oauth_test

import (
	"os"
	"testing"

	"github.com/mcpvisor/mcpvisor/host/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunWithLeakCheck(m)) }
