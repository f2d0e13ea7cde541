package events_test

import (
	"testing"

	"github.com/pdrouter/pdrouter/events"
	pb "github.com/pdrouter/pdrouter/events/eventspb"
)

func TestTierOf(t *testing.T) {
	for medium, want := range map[string]pb.Tier{
		"": pb.Tier_TIER_DEVICE, "GPU": pb.Tier_TIER_DEVICE, "gpu": pb.Tier_TIER_DEVICE,
		"CPU": pb.Tier_TIER_HOST, "CPU_PINNED": pb.Tier_TIER_HOST,
		"DISK": pb.Tier_TIER_DISK, "STORAGE": pb.Tier_TIER_DISK, "FS": pb.Tier_TIER_DISK, "OBJ": pb.Tier_TIER_DISK,
		"SHARED_STORAGE": pb.Tier_TIER_DISK, "EXTERNAL": pb.Tier_TIER_DISK, "NVME_OF_THE_FUTURE": pb.Tier_TIER_DISK,
	} {
		if got := events.TierOf(medium); got != want {
			t.Errorf("TierOf(%q) = %v, want %v", medium, got, want)
		}
	}
	if events.KnownMedium("NVME_OF_THE_FUTURE") || !events.KnownMedium("CPU_PINNED") {
		t.Error("KnownMedium")
	}
}
