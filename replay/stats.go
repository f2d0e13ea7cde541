package replay

import (
	"math"
	"slices"
)

// Distribution summarizes a sample: count, extremes, mean, percentiles by
// the nearest-rank method (a percentile is always a value that occurred,
// which makes "set the threshold at p25" reproducible to the token), and a
// histogram.
type Distribution struct {
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	// Percentiles maps "p5", "p10", … to values.
	Percentiles map[string]float64 `json:"percentiles"`
	Buckets     []Bucket           `json:"buckets,omitempty"`
}

// Bucket counts the values in [Lo, Hi).
type Bucket struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
}

// percentileNames are the percentiles every distribution reports.
var percentileNames = []struct {
	name string
	q    float64
}{{"p5", 0.05}, {"p10", 0.10}, {"p25", 0.25}, {"p50", 0.50}, {"p75", 0.75}, {"p90", 0.90}, {"p95", 0.95}, {"p99", 0.99}}

// quantile is the nearest-rank q-quantile of sorted values.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// distribution summarizes values; edges are the histogram's bucket edges
// (values below the first or at/after the last go to open end buckets).
func distribution(values []float64, edges []float64) Distribution {
	d := Distribution{Count: len(values), Percentiles: map[string]float64{}}
	if len(values) == 0 {
		return d
	}
	s := slices.Clone(values)
	slices.Sort(s)
	d.Min, d.Max = s[0], s[len(s)-1]
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	d.Mean = sum / float64(len(s))
	for _, p := range percentileNames {
		d.Percentiles[p.name] = quantile(s, p.q)
	}
	if len(edges) > 1 {
		for i := 0; i+1 < len(edges); i++ {
			d.Buckets = append(d.Buckets, Bucket{Lo: edges[i], Hi: edges[i+1]})
		}
		for _, v := range s {
			i, _ := slices.BinarySearch(edges, v)
			if i < len(edges) && edges[i] == v {
				i++
			}
			// edges[i-1] <= v < edges[i]: bucket i-1.
			b := min(max(i-1, 0), len(d.Buckets)-1)
			d.Buckets[b].Count++
		}
	}
	return d
}

// islEdges are power-of-two bucket edges for token counts, up to max.
func islEdges(max float64) []float64 {
	edges := []float64{0, 64}
	for edges[len(edges)-1] <= max {
		edges = append(edges, 2*edges[len(edges)-1])
	}
	return edges
}

// ratioEdges are the deciles of [0, 1], with 1 itself in the last bucket.
func ratioEdges() []float64 {
	return []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, math.Nextafter(1, 2)}
}
