package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/pdrouter/pdrouter/events"
)

// MaxIDPrefixLen bounds the id prefix, so that a namespace (at most 63
// bytes) always fits whole in a worker id and the prefix of the ids a
// watcher owns stays exact.
const MaxIDPrefixLen = 32

// DefaultIDPrefix starts the worker ids of pods: "k8s.<namespace>.<pod>".
const DefaultIDPrefix = "k8s"

// hashSuffixLen is the hex digits of the SHA-256 of "<namespace>/<pod>"
// that end an id cut to events.MaxWorkerIDLen: 64 bits keep two long pod
// names apart.
const hashSuffixLen = 16

// CheckIDPrefix refuses a prefix that is empty, longer than MaxIDPrefixLen,
// or not made of lower-case letters, digits and '-': a '.' would make the
// prefix of one namespace the prefix of another's.
func CheckIDPrefix(p string) error {
	if p == "" || len(p) > MaxIDPrefixLen {
		return fmt.Errorf("id prefix %q: 1 to %d bytes are required", p, MaxIDPrefixLen)
	}
	for _, c := range []byte(p) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("id prefix %q: only lower-case letters, digits and '-' are allowed", p)
		}
	}
	return nil
}

// WorkerID is the worker id of a pod: "<prefix>.<namespace>.<name>", a
// function of the three alone, so the same pod always has the same id and a
// restarted watcher recognizes its workers. A namespace has no '.', so the
// id's second segment is always the namespace (OwnedPrefix relies on it).
// An id longer than events.MaxWorkerIDLen (pod names reach 253 bytes) is cut
// and ends in "-" and hashSuffixLen hex digits of the SHA-256 of
// "<namespace>/<name>", so two long names that share a beginning still get
// two ids.
func WorkerID(prefix, namespace, name string) string {
	id := OwnedPrefix(prefix, namespace) + name
	if len(id) <= events.MaxWorkerIDLen {
		return id
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return id[:events.MaxWorkerIDLen-hashSuffixLen-1] + "-" + hex.EncodeToString(sum[:])[:hashSuffixLen]
}

// OwnedPrefix is the beginning of every worker id a watcher with this
// prefix registers for pods in namespace ("" for a watcher of every
// namespace). Reconciling removes only workers whose id starts with it.
func OwnedPrefix(prefix, namespace string) string {
	if namespace == "" {
		return prefix + "."
	}
	return prefix + "." + namespace + "."
}
