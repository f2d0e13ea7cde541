package decider

import (
	"errors"
	"fmt"
)

// ErrNoDecodeWorker is matched (errors.Is) by every *NoWorkerError. No decision exists
// without a decode worker: a prefill worker cannot generate tokens, so there is no
// fallback, and the API should answer 503 (retry later) without recording a decision.
var ErrNoDecodeWorker = errors.New("decider: no eligible decode worker")

// ErrInvalidRequest is matched (errors.Is) by every *RequestError.
var ErrInvalidRequest = errors.New("decider: invalid request")

// NoWorkerError says why no decode worker was eligible, with counts, so that the error a
// caller sees tells "nothing registered" apart from "all draining".
type NoWorkerError struct {
	Model string
	// Registered is the number of decode workers registered for the model.
	Registered int
	// Unavailable is how many of those were excluded as unavailable.
	Unavailable int
	// Unhealthy is how many of those were excluded as unhealthy (health records).
	Unhealthy int
	// NoBlockSize is how many of those had no known block size.
	NoBlockSize int
}

func (e *NoWorkerError) Error() string {
	if e.Registered == 0 {
		return fmt.Sprintf("decider: no eligible decode worker: no decode worker is registered for model %q", e.Model)
	}
	return fmt.Sprintf("decider: no eligible decode worker for model %q: %d registered, %d unhealthy, %d unavailable, %d without a block size",
		e.Model, e.Registered, e.Unhealthy, e.Unavailable, e.NoBlockSize)
}

// Is makes errors.Is(err, ErrNoDecodeWorker) true.
func (e *NoWorkerError) Is(target error) bool { return target == ErrNoDecodeWorker }

// RequestError names the request field at fault.
type RequestError struct {
	Field string
	Msg   string
}

func (e *RequestError) Error() string { return "decider: invalid request: " + e.Field + " " + e.Msg }

// Is makes errors.Is(err, ErrInvalidRequest) true.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }
