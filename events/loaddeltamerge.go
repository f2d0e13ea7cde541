package events

import "google.golang.org/protobuf/encoding/protowire"

// Merging load deltas. A writer's group commit may carry several deltas
// of one decode worker (its decisions and lifecycle events of that group);
// they go out as one record, so peers fetch, decode and commit one record
// where there were several.
//
// Two encoded LoadDelta values concatenated are the encoding of their
// merge (Protobuf appends repeated fields and keeps the last scalar, and
// both carry the same writer_id), so merging copies bytes and decodes
// nothing. The merge keeps every rule a reader checks: it refuses to pass
// MaxDeltaBytes or MaxDeltaEntries, to merge a value that is not a plain
// list of entries, or one whose decisions share hashes
// (shares_hashes_with counts entries from the start of its own record, so
// it would name another entry once appended after others).

// DeltaEntries returns how many decisions and lifecycle entries a LoadDelta
// value holds, and false when the value cannot be merged: malformed, past
// MaxDeltaBytes, with a field other than writer_id and entries, or with a
// decision that shares hashes.
func DeltaEntries(v []byte) (int, bool) {
	if len(v) > MaxDeltaBytes {
		return 0, false
	}
	n := 0
	for len(v) > 0 {
		num, typ, l := protowire.ConsumeTag(v)
		if l < 0 {
			return 0, false
		}
		v = v[l:]
		if typ != protowire.BytesType {
			return 0, false
		}
		val, l := protowire.ConsumeBytes(v)
		if l < 0 {
			return 0, false
		}
		v = v[l:]
		switch num {
		case 1: // writer_id
		case 2: // a decision
			if sharesHashes(val) {
				return 0, false
			}
			n++
		case 3: // a lifecycle entry
			n++
		default:
			return 0, false
		}
	}
	return n, true
}

// sharesHashes reports whether an encoded DecisionDelta sets
// shares_hashes_with (field 12), or cannot be read far enough to tell.
func sharesHashes(v []byte) bool {
	for len(v) > 0 {
		num, typ, l := protowire.ConsumeTag(v)
		if l < 0 {
			return true
		}
		v = v[l:]
		if num == 12 {
			return true
		}
		l = protowire.ConsumeFieldValue(num, typ, v)
		if l < 0 {
			return true
		}
		v = v[l:]
	}
	return false
}

// MergeDeltas appends the LoadDelta value src, of srcEntries entries, to
// dst, of dstEntries, when the result stays within the bounds: the merged
// value and its entry count, or false (dst unchanged).
func MergeDeltas(dst []byte, dstEntries int, src []byte, srcEntries int) ([]byte, int, bool) {
	if len(dst)+len(src) > MaxDeltaBytes || dstEntries+srcEntries > MaxDeltaEntries {
		return dst, dstEntries, false
	}
	return append(dst, src...), dstEntries + srcEntries, true
}
