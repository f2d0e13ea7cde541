package events

import (
	"errors"
	"fmt"
	"unicode"

	"google.golang.org/protobuf/proto"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// MaxWorkerIDLen bounds worker ids: they become record keys, metric label
// values and Pebble key components.
const MaxWorkerIDLen = 253

// MaxBlockSize bounds tokens per block; engines use 16 to 512.
const MaxBlockSize = 1 << 16

// Validate checks the invariants a record must hold before it may change
// state. Proto decoding accepts any well-formed bytes; this rejects values
// that would corrupt the prefix tables (a BlockStored whose token count does
// not match its blocks, an event for no worker, ...).
func Validate(m proto.Message) error {
	switch v := m.(type) {
	case *pb.KvEventRecord:
		return validateKv(v)
	case *pb.LoadSample:
		return ValidateWorkerID(v.GetWorker().GetWorkerId())
	case *pb.WorkerRegistration:
		if err := ValidateWorkerID(v.GetWorkerId()); err != nil {
			return err
		}
		if v.GetPool() != pb.Pool_POOL_PREFILL && v.GetPool() != pb.Pool_POOL_DECODE {
			return fmt.Errorf("worker %q: pool must be prefill or decode, got %v", v.GetWorkerId(), v.GetPool())
		}
		if v.GetBlockSize() == 0 || v.GetBlockSize() > MaxBlockSize {
			return fmt.Errorf("worker %q: block_size %d out of range [1, %d]", v.GetWorkerId(), v.GetBlockSize(), MaxBlockSize)
		}
		return nil
	case *pb.DecisionRecord:
		if v.GetDecisionId() == "" || v.GetRequestId() == "" {
			return errors.New("decision_id and request_id are required")
		}
		if v.GetMode() != "local" && v.GetMode() != "remote" {
			return fmt.Errorf("decision %s: mode %q is neither local nor remote", v.GetDecisionId(), v.GetMode())
		}
		return ValidateWorkerID(v.GetDecodeWorker().GetWorkerId())
	case *pb.OutcomeEvent:
		if v.GetRequestId() == "" {
			return errors.New("outcome: request_id is required")
		}
		if v.GetKind() == pb.OutcomeEvent_KIND_UNSPECIFIED {
			return fmt.Errorf("outcome for %s: kind is unspecified", v.GetRequestId())
		}
		return nil
	}
	return fmt.Errorf("events: no validation rule for %T", m)
}

// ValidateWorkerID rejects empty, overlong or non-printable worker ids, and
// ids with '/', which WorkerRank reserves.
func ValidateWorkerID(id string) error {
	if id == "" {
		return errors.New("worker_id is required")
	}
	if len(id) > MaxWorkerIDLen {
		return fmt.Errorf("worker_id is %d bytes: at most %d are allowed", len(id), MaxWorkerIDLen)
	}
	for i, r := range id {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("worker_id %q has a non-printable or space character at byte %d", id, i)
		}
		if r == '/' {
			// "/" separates a worker from its data-parallel rank (WorkerRank).
			return fmt.Errorf("worker_id %q has '/' at byte %d: it is reserved for the dp rank suffix", id, i)
		}
	}
	return nil
}

func validateKv(v *pb.KvEventRecord) error {
	if err := ValidateWorkerID(v.GetWorker().GetWorkerId()); err != nil {
		return err
	}
	for i, e := range v.GetEvents() {
		switch ev := e.GetEvent().(type) {
		case *pb.KvEvent_Stored:
			s := ev.Stored
			if len(s.GetBlockHashes()) == 0 {
				return fmt.Errorf("events[%d]: BlockStored without block hashes", i)
			}
			if s.GetBlockSize() == 0 || s.GetBlockSize() > MaxBlockSize {
				return fmt.Errorf("events[%d]: BlockStored block_size %d out of range [1, %d]", i, s.GetBlockSize(), MaxBlockSize)
			}
			if want := uint64(len(s.GetBlockHashes())) * uint64(s.GetBlockSize()); uint64(len(s.GetTokenIds())) != want {
				return fmt.Errorf("events[%d]: BlockStored has %d token ids for %d blocks of %d: want %d",
					i, len(s.GetTokenIds()), len(s.GetBlockHashes()), s.GetBlockSize(), want)
			}
		case *pb.KvEvent_Removed:
			if len(ev.Removed.GetBlockHashes()) == 0 {
				return fmt.Errorf("events[%d]: BlockRemoved without block hashes", i)
			}
		case *pb.KvEvent_Cleared, *pb.KvEvent_SourceReset, *pb.KvEvent_Unknown:
		default:
			return fmt.Errorf("events[%d]: no event set", i)
		}
	}
	return nil
}
