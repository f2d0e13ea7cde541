package events

import (
	"strings"

	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

// TierOf normalizes an engine's `medium` string to a tier. vLLM says "GPU",
// "CPU", "STORAGE" ("FS"/"OBJ" in v0.26.0); SGLang says "GPU", "CPU_PINNED",
// "DISK", "EXTERNAL"; connectors say other things. Case is ignored because
// nothing guarantees it.
//
// An empty medium (older engines had no field, or sent nil) is the engine's
// own GPU prefix cache. An unknown string is TIER_DISK, the least credited
// tier: overstating how cheap a block is to bring back would send requests
// to a worker that then recomputes the prefix.
func TierOf(medium string) pb.Tier {
	t, _ := tierOf(medium)
	return t
}

// KnownMedium reports whether TierOf recognizes medium, so unknown strings
// can be counted and noticed.
func KnownMedium(medium string) bool {
	_, ok := tierOf(medium)
	return ok
}

func tierOf(medium string) (pb.Tier, bool) {
	switch strings.ToUpper(medium) {
	case "", "GPU":
		return pb.Tier_TIER_DEVICE, true
	case "CPU", "CPU_PINNED":
		return pb.Tier_TIER_HOST, true
	case "DISK", "STORAGE", "FS", "OBJ", "SHARED_STORAGE", "EXTERNAL":
		return pb.Tier_TIER_DISK, true
	}
	return pb.Tier_TIER_DISK, false
}

// IsOffloadStore reports whether s is an offload store: a BlockStored of a
// tier other than the device's that carries no token ids. vLLM's
// OffloadingConnector announces the blocks it copies off the GPU so, under
// the engine hashes they have on the GPU: the blocks are resolved through
// the worker's engine hash → router hash table instead of hashed, and their
// parent and block size are not used. A device store always needs its
// tokens, since the table is built from them.
func IsOffloadStore(s *pb.BlockStored) bool {
	t := s.GetTier()
	return len(s.GetTokenIds()) == 0 && t != pb.Tier_TIER_DEVICE && t != pb.Tier_TIER_UNSPECIFIED
}
