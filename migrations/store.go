package migrations

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// StoreSchemaVersion is the layout version of the keys and values a replica
// keeps in Pebble. Bump it whenever statestore changes how it encodes state,
// and either register an upgrade from the previous version in storeUpgrades
// or accept that old stores are rebuilt by replay.
//
// History: v1, prefix tables, registry, load and active accounting; v2 adds
// decision records, their request and time indexes, and the KV-health
// times (statestore/keys.go); v3 adds the parent's router hash to prefix
// entries, so a replica rebuilds its hot index in chain order; v4 adds the
// decision's workers to request index values, so a lifecycle event finds
// them without reading the record; v5 stores a decision's header and its
// position on the decisions topic instead of the whole record (the table is
// read from the topic when asked for); v6 keeps an active request's hash
// chain out of its entry, which names the chain's length and its decision
// record's position instead (statestore/chains.go); v7 adds each worker's
// latest WorkerHealth record (statestore/workerhealth.go). v1 to v5 stores
// are rebuilt: a v4 record does not know its position, a v5 entry holds its
// chain. A v6 store upgrades as it is: it holds no health, and it skipped
// none either, since readers are upgraded before any writer of health
// records (events/SCHEMA.md).
const StoreSchemaVersion uint32 = 7

// PebbleFormat pins Pebble's on-disk format. Pebble's FormatDefault picks the
// oldest format it supports and may change between releases; pinning keeps a
// store's format a deliberate choice.
const PebbleFormat = pebble.FormatValueSeparation

// StoreAction is what to do with a store found on disk.
type StoreAction int

const (
	// StoreInit: no store yet; create one at StoreSchemaVersion.
	StoreInit StoreAction = iota
	// StoreOpen: the store is current.
	StoreOpen
	// StoreUpgrade: run the registered upgrades in order, then open.
	StoreUpgrade
	// StoreRebuild: wipe the store and rebuild it by replaying the log (or
	// from a peer's snapshot). Always safe: the store is a materialization of
	// Kafka, never the source of truth.
	StoreRebuild
)

func (a StoreAction) String() string {
	return [...]string{"init", "open", "upgrade", "rebuild"}[a]
}

// StoreUpgradeFunc rewrites a store in place from version From to From+1.
// It must be idempotent: a crash half-way is followed by running it again.
type StoreUpgradeFunc func(db *pebble.DB) error

// storeUpgrades maps a version to the upgrade that lifts it by one.
var storeUpgrades = map[uint32]StoreUpgradeFunc{
	// v6 → v7: the worker health family is new and starts empty.
	6: func(*pebble.DB) error { return nil },
}

// StoreRule decides what to do with a store that recorded version found
// (exists is false when there is no store at all). The rule:
//   - same version: open;
//   - older, with an upgrade path to the current version: upgrade;
//   - older without a path, or newer (a binary was rolled back): rebuild,
//     with the reason, so the operator sees why start-up replays.
func StoreRule(found uint32, exists bool) (StoreAction, string) {
	switch {
	case !exists:
		return StoreInit, "no store yet"
	case found == StoreSchemaVersion:
		return StoreOpen, "store is current"
	case found > StoreSchemaVersion:
		return StoreRebuild, fmt.Sprintf("store has schema v%d, newer than this build's v%d (rolled back?)", found, StoreSchemaVersion)
	}
	for v := found; v < StoreSchemaVersion; v++ {
		if storeUpgrades[v] == nil {
			return StoreRebuild, fmt.Sprintf("store has schema v%d and there is no upgrade from v%d to v%d", found, v, v+1)
		}
	}
	return StoreUpgrade, fmt.Sprintf("store has schema v%d: upgrading to v%d", found, StoreSchemaVersion)
}

// UpgradeStore runs the upgrades from found to StoreSchemaVersion. Callers
// check StoreRule first; recording the new version is the caller's job, in
// the same batch as its other metadata.
func UpgradeStore(db *pebble.DB, found uint32) error {
	for v := found; v < StoreSchemaVersion; v++ {
		up := storeUpgrades[v]
		if up == nil {
			return fmt.Errorf("migrations: no store upgrade from v%d", v)
		}
		if err := up(db); err != nil {
			return fmt.Errorf("migrations: store upgrade v%d→v%d: %w", v, v+1, err)
		}
	}
	return nil
}
