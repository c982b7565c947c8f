package transport

// The limiter's constants, for the tests in package transport_test.
const (
	OutputBurst        = outputBurst
	OutputRate         = outputRate
	OutputSummaryDelay = outputSummaryDelay
)
