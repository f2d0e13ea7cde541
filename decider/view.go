package decider

// View is the read-only state a decision reads. It is split into four narrow interfaces
// because in the product each part comes from a different materialization (registry,
// prefix index, load table, active accounting) and tests often fake only one of them.
//
// A View must be a consistent snapshot for the duration of one Decide call, and its
// answers must not depend on anything but its state: the decider's determinism is only as
// good as the view's. The order of Workers() carries no meaning; the decider sorts by
// worker id, so two views that list the same workers in different orders give
// byte-identical decisions.
type View interface {
	Registry
	PrefixIndex
	LoadSource
	ActiveAccounting
	LatencyModel
}

// Registry lists the registered workers.
type Registry interface {
	// Workers returns every registered worker. Element i has WorkerRef i. The slice is
	// owned by the view and must not be modified or retained after the call.
	Workers() []WorkerInfo
}

// PrefixIndex answers prefix-cache overlap. It takes a whole chain and fills a
// per-worker result in one call, because a real index (a radix tree or an inverted
// index from block hash to holders) walks the chain once for all workers; asking worker
// by worker would walk it once per worker.
type PrefixIndex interface {
	// MatchPrefix sets dst[ref] for every worker whose BlockSize is blockSize, to the
	// leading blocks of chain that the worker holds, by tier. chain holds the router's
	// hashes of the request's complete blocks of that size, first block first. Entries of
	// workers with another block size must be left as they are. len(dst) is
	// len(Workers()). The Total of an entry must not exceed len(chain).
	MatchPrefix(blockSize int, chain []uint64, dst []TierOverlap)
}

// LoadSource serves the latest self-reported load per worker.
type LoadSource interface {
	// Load returns the worker's latest load sample, and false when it never sent one
	// (or the state has aged it out).
	Load(w WorkerRef) (LoadSample, bool)
}

// ActiveAccounting serves the router-side active request accounting.
type ActiveAccounting interface {
	// Active returns the worker's active decode blocks and pending prefill tokens.
	Active(w WorkerRef) ActiveLoad
	// MatchActive sets dst[ref] for every worker whose BlockSize is blockSize, to how
	// many blocks of chain are already active on the worker (held by requests in
	// flight), so that the request's potential decode blocks count them once. Entries of
	// other workers must be left as they are. Because block hashes are chained, the
	// shared blocks are always a leading run of chain.
	MatchActive(blockSize int, chain []uint64, dst []int)
}
