package sim

import "time"

// The default simulated worker is one NVIDIA H100 SXM5 80 GB serving Llama-3.1-8B in
// BF16 with vLLM defaults. It is small enough that the Mooncake trace's arrival rate
// (about 60,000 prompt tokens per second on average) loads a 2P2D fleet heavily but not
// hopelessly, which is where the choice between local and remote prefill matters.
//
// Every figure below is either a published number (source named) or an assumption
// (marked as such, with the reason for its value). Derived values are computed from
// them in DefaultHardware rather than written down, so a reader can check the
// arithmetic.

// Published figures of the model: Llama-3.1-8B (Meta, model card and config.json on
// Hugging Face, meta-llama/Llama-3.1-8B): 8.03 B parameters, 32 layers, hidden size 4096,
// 8 key-value heads (grouped-query attention) of head dimension 128, vocabulary 128,256.
const (
	llama8BParams  = 8.03e9
	llama8BLayers  = 32
	llama8BHidden  = 4096
	llama8BKVHeads = 8
	llama8BHeadDim = 128
	llama8BVocab   = 128256
	// llama8BMaxModelLen is max_position_embeddings in config.json: 131,072 tokens.
	llama8BMaxModelLen = 131072
	bf16Bytes          = 2
	llama8BModelName   = "meta-llama/Llama-3.1-8B-Instruct"
)

// Published figures of the GPU and network.
const (
	// h100BF16FLOPS is the H100 SXM5 dense BF16 tensor-core peak: 989.4 TFLOPS
	// (NVIDIA H100 datasheet; 1,979 TFLOPS is the 2:4-sparse figure).
	h100BF16FLOPS = 989.4e12
	// h100HBMBytesPerSec is the H100 SXM5 HBM3 bandwidth: 3.35 TB/s (NVIDIA datasheet).
	h100HBMBytesPerSec = 3.35e12
	// h100MemoryBytes is the H100 SXM5's 80 GB of HBM3 (NVIDIA datasheet), in GiB as
	// the CUDA runtime reports it.
	h100MemoryBytes = 80 << 30
	// nic400GbpsBytesPerSec is one 400 Gb/s RDMA NIC (NVIDIA ConnectX-7, InfiniBand
	// NDR or 400 GbE, one per GPU in DGX H100 systems), in bytes per second. This is
	// the path a KV cache takes between a prefill and a decode worker on different
	// nodes; Mooncake (FAST'25) and NIXL-based vLLM/Dynamo P/D move KV over RDMA.
	nic400GbpsBytesPerSec = 400e9 / 8
)

// vLLM defaults (vLLM engine arguments, V1 engine).
const (
	// vllmBlockSize is --block-size's default on CUDA: 16 tokens per KV block.
	vllmBlockSize = 16
	// vllmGPUMemoryUtilization is --gpu-memory-utilization's default, 0.9.
	vllmGPUMemoryUtilization = 0.9
	// vllmMaxNumBatchedTokens is the per-step token budget of chunked prefill that V1
	// picks for the OpenAI server on GPUs with 70 GiB or more (recalled from vLLM's
	// engine-argument defaults; smaller GPUs get 2048).
	vllmMaxNumBatchedTokens = 8192
	// vllmMaxNumSeqs is the matching default cap on running requests (recalled as
	// above: 1024 on large GPUs, 256 on others).
	vllmMaxNumSeqs = 1024
)

// Assumptions: efficiencies and overheads that no datasheet gives.
const (
	// assumedPrefillMFU is the fraction of peak FLOPS a prefill achieves. Large
	// prefill GEMMs on H100 reach roughly half of peak in published serving
	// measurements (DistServe, OSDI'24, and Splitwise, ISCA'24, both describe prefill
	// as compute-bound and report throughputs in this range); 0.5 is that
	// round figure, not a measurement of ours.
	assumedPrefillMFU = 0.5
	// assumedHBMEfficiency is the fraction of HBM bandwidth a decode step achieves
	// reading weights and KV (memory-bound kernels typically reach 70–85 % of peak).
	assumedHBMEfficiency = 0.75
	// assumedStepOverhead is the CPU-side cost of one scheduler step (scheduling,
	// sampling, detokenization, launching CUDA graphs). vLLM V1 moved most of it off
	// the critical path; 2 ms keeps small batches from being unrealistically fast.
	assumedStepOverhead = 2 * time.Millisecond
	// assumedActivationReserve is the memory vLLM's profiler keeps for activations
	// and CUDA graphs out of the utilization budget before sizing the KV cache.
	assumedActivationReserve = 4 << 30
	// assumedNICEfficiency is the fraction of the NIC's line rate a bulk KV transfer
	// sustains (RDMA writes of large blocks; protocol overhead and fan-in).
	assumedNICEfficiency = 0.8
	// assumedHostLoadBytesPerSec is the sustained bandwidth of a KV load from host
	// memory into the GPU. The link is PCIe Gen5 x16: 32 GT/s per lane × 16 lanes ×
	// 128b/130b ≈ 63 GB/s per direction (PCI-SIG, PCIe 5.0). vLLM's offloading
	// connector copies block by block, and with vLLM 0.11's per-layer KV layout a
	// block is a few tens of KiB per layer, far below the sizes at which DMA reaches
	// line rate (the vLLM blog "Inside vLLM's New KV Offloading Connector", January
	// 2026, describes the small blocks and the later re-layout). 25 GB/s, about 40 %
	// of line rate, is a round effective figure, not a measurement of ours;
	// --cpu-kv-gbps overrides it.
	assumedHostLoadBytesPerSec = 25e9
)

// Hardware is what the timing model is computed from. All fields are plain numbers so
// a test or a flag can change one and see the effect.
type Hardware struct {
	// ModelName is what workers register with and requests ask for.
	ModelName string
	// Params is the model's parameter count: a dense forward pass costs 2·Params FLOPs
	// per token for the matrix multiplies.
	Params float64
	// Layers and Hidden size the attention cost: scores (QKᵀ) and the weighted sum
	// (AV) each cost 2·Hidden FLOPs per layer per (query, key) pair.
	Layers, Hidden int
	// KVBytesPerToken is 2 (K and V) · layers · kv heads · head dim · bytes per value.
	KVBytesPerToken float64
	// WeightBytes are read once per step.
	WeightBytes float64
	// PeakFLOPS·PrefillMFU is the sustained compute of a prefill.
	PeakFLOPS, PrefillMFU float64
	// HBMBytesPerSec·HBMEfficiency is the sustained memory bandwidth of a step.
	HBMBytesPerSec, HBMEfficiency float64
	// StepOverhead is added to every step.
	StepOverhead time.Duration
	// TransferBytesPerSec is the sustained bandwidth of a KV transfer into a decode
	// worker; transfers into one worker share it (they are serialized).
	TransferBytesPerSec float64
	// HostBytesPerSec is the sustained bandwidth of a KV load from the engine's host
	// (CPU) tier into its GPU; loads into one engine share it (they are serialized).
	HostBytesPerSec float64
	// TransferLatency is a fixed cost per transfer (connection, metadata); 0 by default
	// because no source gives a defensible number.
	TransferLatency time.Duration
	// MemoryBytes, MemoryUtilization and ActivationReserve size the KV cache.
	MemoryBytes       float64
	MemoryUtilization float64
	ActivationReserve float64
	// Vocab bounds the simulated token ids.
	Vocab int
	// MaxModelLen is the longest context (prompt plus output) a request may have,
	// vLLM's --max-model-len; an engine also bounds it by its KV cache (0: by the
	// cache alone).
	MaxModelLen int
}

// DefaultHardware is Llama-3.1-8B BF16 on one H100 SXM5, with the constants above.
func DefaultHardware() Hardware {
	return Hardware{
		ModelName:           llama8BModelName,
		Params:              llama8BParams,
		Layers:              llama8BLayers,
		Hidden:              llama8BHidden,
		KVBytesPerToken:     2 * llama8BLayers * llama8BKVHeads * llama8BHeadDim * bf16Bytes, // 131,072 B
		WeightBytes:         llama8BParams * bf16Bytes,                                       // ≈16.1 GB
		PeakFLOPS:           h100BF16FLOPS,
		PrefillMFU:          assumedPrefillMFU,
		HBMBytesPerSec:      h100HBMBytesPerSec,
		HBMEfficiency:       assumedHBMEfficiency,
		StepOverhead:        assumedStepOverhead,
		TransferBytesPerSec: nic400GbpsBytesPerSec * assumedNICEfficiency, // 40 GB/s
		HostBytesPerSec:     assumedHostLoadBytesPerSec,
		MemoryBytes:         h100MemoryBytes,
		MemoryUtilization:   vllmGPUMemoryUtilization,
		ActivationReserve:   assumedActivationReserve,
		Vocab:               llama8BVocab,
		MaxModelLen:         llama8BMaxModelLen,
	}
}

// KVBlocks is the number of KV blocks of blockSize tokens that fit, as vLLM sizes the
// cache: utilization × memory − weights − activation reserve, divided by the bytes of
// one block. For the defaults that is about 27,000 blocks (≈430 k tokens).
func (h Hardware) KVBlocks(blockSize int) int {
	free := h.MemoryBytes*h.MemoryUtilization - h.WeightBytes - h.ActivationReserve
	if free <= 0 || blockSize <= 0 || h.KVBytesPerToken <= 0 {
		return 0
	}
	return int(free / (h.KVBytesPerToken * float64(blockSize)))
}

// HostKVBlocks is the number of KV blocks of blockSize tokens that bytes of host memory
// hold: the host tier stores blocks in the GPU's layout, so a block costs the same
// bytes there. For 64 GiB of Llama-3.1-8B that is 32,768 blocks (2 MiB each).
func (h Hardware) HostKVBlocks(bytes float64, blockSize int) int {
	if !(bytes > 0) || blockSize <= 0 || h.KVBytesPerToken <= 0 {
		return 0
	}
	return int(bytes / (h.KVBytesPerToken * float64(blockSize)))
}

// Limits of the host tier's flags. MaxHostKVBytes, 4 TiB per engine, is more host
// memory than a server has per GPU (a DGX H100 has 2 TiB for 8 GPUs); the tier
// allocates as it fills, so the bound keeps a typo from meaning "infinite", not
// memory from running out. MaxHostBytesPerSec, 1 TB/s, is above any host link.
const (
	MaxHostKVBytes     = 4 << 40
	MaxHostBytesPerSec = 1e12
)
