-- TTFT and ITL by mode, reason and effective-ISL bucket, from `pdrouter export`.
--
--   pdrouter export decisions --format parquet --out decisions.parquet
--   pdrouter export outcomes  --format parquet --out outcomes.parquet
--   duckdb -c "SET VARIABLE decisions = 'decisions.parquet';
--              SET VARIABLE outcomes = 'outcomes.parquet';
--              .read replay/analytics/ttft_itl_by_mode.sql"
--
-- A request's TTFT is its earliest reported ttft_ms (prefill_done usually
-- carries it); its ITL is the itl_ms_mean of its terminal event (completed
-- or cancelled). Requests without a terminal event are left out. Buckets are
-- powers of two of the effective ISL (uncached prompt tokens), so each row
-- compares requests that left the same amount of prefill work.
WITH d AS (
    SELECT request_id, decision_id, mode, reason, effective_isl
    FROM read_parquet(getvariable('decisions'))
),
o AS (
    SELECT request_id,
           min(ttft_ms) FILTER (WHERE ttft_ms IS NOT NULL)                          AS ttft_ms,
           arg_min(itl_ms_mean, event_time) FILTER (WHERE kind IN ('completed', 'cancelled')) AS itl_ms_mean,
           count(*) FILTER (WHERE kind IN ('completed', 'cancelled'))               AS terminal
    FROM read_parquet(getvariable('outcomes'))
    GROUP BY request_id
),
j AS (
    SELECT d.mode, d.reason,
           CASE WHEN d.effective_isl = 0 THEN 0
                ELSE CAST(pow(2, floor(log2(d.effective_isl))) AS BIGINT) END AS eff_isl_bucket,
           o.ttft_ms, o.itl_ms_mean
    FROM d JOIN o USING (request_id)
    WHERE o.terminal > 0
)
SELECT mode, reason, eff_isl_bucket,
       count(*)                                   AS requests,
       round(avg(ttft_ms), 3)                     AS ttft_ms_mean,
       round(quantile_cont(ttft_ms, 0.5), 3)      AS ttft_ms_p50,
       round(quantile_cont(ttft_ms, 0.99), 3)     AS ttft_ms_p99,
       round(avg(itl_ms_mean), 3)                 AS itl_ms_mean,
       round(quantile_cont(itl_ms_mean, 0.5), 3)  AS itl_ms_p50
FROM j
GROUP BY ALL
ORDER BY mode, reason, eff_isl_bucket;
