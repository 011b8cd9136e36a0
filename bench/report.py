"""Render bench/results.json into bench/RESULTS.md, the README's table and a chart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
README = HERE.parent / "README.md"


def _num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, Logbus, baseline or goal, ratio / note) rows, in the order of the issues."""
    out: list[tuple[str, str, str, str]] = []
    redis = r.get("redis", {})
    xadd = redis.get("redis_xadd_records_per_s")
    xread = redis.get("redis_xread_records_per_s")
    if e := r.get("engine"):
        lk = e["lookup_us"]
        out += [
            (
                "engine: append 1 MiB batches (page cache)",
                f"{_num(e['append_mb_s'])} MB/s",
                "goal ≥ 1,000 MB/s",
                "",
            ),
            ("engine: append, stamped in place", f"{_num(e['append_in_place_mb_s'])} MB/s", "", ""),
            ("engine: sequential read", f"{_num(e['read_mb_s'])} MB/s", "goal ≥ 2,000 MB/s", ""),
            (
                "engine: random lookup, 10 vs 10,000 segments",
                f"{lk['segments_10_us']} µs vs {lk['segments_10000_us']} µs",
                "goal within 1.5x",
                f"{lk['ratio_10000_vs_10']}x ({lk['ratio_10000_vs_10_same_data']}x against 10 segments holding the same data)",
            ),
        ]
    if h := r.get("http_produce"):
        jp = h["json_produce_records_per_s"]
        # Rerun alone (--only http_produce), the section carries its own same-run Redis.
        hx = h.get("redis_baseline", {}).get("redis_xadd_records_per_s", xadd)
        out += [
            (
                "HTTP JSON produce, 1,000 records/request, 100 B",
                f"{_num(jp)} records/s",
                f"Redis XADD pipelined: {_num(hx)} records/s" if hx else "",
                f"{jp / hx:.1f}x Redis; goal ≥ 300,000" if hx else "goal ≥ 300,000",
            ),
            (
                "HTTP binary produce, 1 MiB batches",
                f"{_num(h['binary_produce_mb_per_s'])} MB/s",
                "goal ≥ 500 MB/s",
                "",
            ),
        ]
    if f := r.get("fetch"):
        zc, cp = f["zerocopy"], f["copy"]
        out += [
            (
                "HTTP binary fetch, cached, one client (whole partition)",
                f"{zc['whole_gbps']:.2f} GB/s",
                f"read-and-send path: {cp['whole_gbps']:.2f} GB/s",
                f"{f['speedup_whole']}x; goal ≥ 1 GB/s",
            ),
            (
                "HTTP binary fetch, consumer loop of 16 MiB fetches",
                f"{zc['consumer_gbps']:.2f} GB/s",
                f"read-and-send path: {cp['consumer_gbps']:.2f} GB/s",
                f"{f['speedup_consumer']}x",
            ),
            (
                "broker CPU per GB fetched",
                f"{zc['server_cpu_s_per_gb']:.2f} s",
                f"read-and-send path: {cp['server_cpu_s_per_gb']:.2f} s",
                f"{f.get('cpu_saving', 0) * 100:.0f}% saved",
            ),
        ]
    if s := r.get("sdk"):
        # A section rerun alone (--only sdk) carries the Redis baseline of its own run.
        own = s.get("redis_baseline", {})
        out += _sdk_rows(
            s,
            own.get("redis_xadd_records_per_s", xadd),
            own.get("redis_xread_records_per_s", xread),
        )
    out += _later_rows(r)
    out += _cluster_rows(r)
    out += _robustness_rows(r)
    out += _edge_rows(r)
    out += _isolation_rows(r.get("isolation"))
    out += _txn_json_rows(r.get("txn_json"))
    out += _security_rows(r)
    out += _kafka_door_rows(r.get("kafka_door"))
    if xadd:
        out.append(
            ("Redis Streams XADD, pipelined 1,000 (baseline)", f"{_num(xadd)} records/s", "", "")
        )
    if xread:
        out.append(
            ("Redis Streams XREAD COUNT 1,000 (baseline)", f"{_num(xread)} records/s", "", "")
        )
    return out


# (key bench/sdk.py returns, label, goal, which Redis figure to compare with)
SDK_RATES = (
    (
        "produce_send_records_per_s",
        "SDK produce, Producer.send per record, 100 B, acks=1",
        "goal ≥ 1,500,000",
        "xadd",
    ),
    (
        "produce_send_keyed_callback_records_per_s",
        "SDK produce, Producer.send per record with key (1,000 keys) and a delivery callback (a Python function), 100 B, acks=1",
        "goal ≥ 1,000,000",
        "xadd",
    ),
    (
        "produce_send_keyed_recorder_records_per_s",
        "the same loop with `perf produce`'s callback (the compiled latency recorder)",
        "",
        "xadd",
    ),
    (
        "perf_produce_keyed_records_per_s",
        "`logbus perf produce --partitions 4 --keys 1000` (the workload of the row above)",
        "goal within 10%",
        "xadd",
    ),
    (
        "perf_produce_records_per_s",
        "`logbus perf produce --partitions 4` (null keys, as Kafka's tool)",
        "",
        "xadd",
    ),
    (
        "produce_send_many_records_per_s",
        "SDK produce, Producer.send_many, 100 B, acks=1",
        "goal ≥ 1,500,000",
        "xadd",
    ),
    ("consume_records_per_s", "SDK consume, Consumer.poll, 100 B", "goal ≥ 3,000,000", "xread"),
    (
        "consume_columns_records_per_s",
        "SDK consume, Consumer.poll_columns, 100 B",
        "goal ≥ 3,000,000",
        "xread",
    ),
)
E2E_GOAL_P99_MS = 10.0


def _sdk_rows(
    s: dict[str, Any], xadd: float | None, xread: float | None
) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    for key, label, goal, which in SDK_RATES:
        if key not in s:
            continue
        base = xadd if which == "xadd" else xread
        if key == "perf_produce_keyed_records_per_s":
            ratios = [
                f"{s[key] / s[other]:.2f}x {what}"
                for other, what in (
                    ("produce_send_keyed_recorder_records_per_s", "the same loop"),
                    ("produce_send_keyed_callback_records_per_s", "send with a Python callback"),
                )
                if s.get(other)
            ]
            goal = "; ".join([*ratios, goal])
        note = "; ".join(
            part for part in (f"{s[key] / base:.1f}x Redis" if base else "", goal) if part
        )
        out.append(
            (
                label,
                f"{_num(s[key])} records/s",
                f"Redis: {_num(base)} records/s" if base else "",
                note,
            )
        )
    if all(k in s for k in ("e2e_p50_ms", "e2e_p99_ms", "e2e_p999_ms")):
        rate = s.get("e2e_records_per_s", 10_000)
        p99 = s["e2e_p99_ms"]
        met = "met" if p99 <= E2E_GOAL_P99_MS else "missed"
        out.append(
            (
                f"SDK end-to-end latency at {_num(rate)} records/s (produce → consume)",
                f"p50 {s['e2e_p50_ms']:.2f} ms, p99 {p99:.2f} ms, p99.9 {s['e2e_p999_ms']:.2f} ms",
                f"goal p99 ≤ {E2E_GOAL_P99_MS:g} ms",
                met,
            )
        )
    return out


def _later_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Compaction, consumer groups and WebSocket figures."""
    out: list[tuple[str, str, str, str]] = []
    if c := r.get("compaction"):
        out.append(
            (
                "compaction: one cleaner pass, 10% live keys",
                f"{_num(c['clean_mb_s'], 1)} MB/s ({_num(c['clean_records_s'])} records/s)",
                "",
                f"log shrinks to {c['size_after_pct']}%",
            )
        )
    if g := r.get("groups"):
        commits, rebalance = g["commits"], g["rebalance"]
        out += [
            (
                f"group offset commits, {_num(commits['groups'])} groups at once",
                f"{_num(commits['commits_per_s'])} commits/s",
                "",
                f"p50 {commits['latency_p50_ms']} ms, p99 {commits['latency_p99_ms']} ms",
            ),
            (
                f"new member joins a {rebalance['members']}-member group: all hold final assignment",
                f"{_num(rebalance['median_ms'])} ms",
                f"goal within {rebalance['goal_heartbeat_intervals']} heartbeat intervals "
                f"({rebalance['heartbeat_interval_ms']} ms each)",
                f"{rebalance['median_heartbeat_intervals']} intervals",
            ),
        ]
    if s := r.get("spark"):
        out.append(
            (
                f"Spark batch read, {_num(s['records'])} records, {s['partitions']} partitions, "
                f"{s['master']}",
                f"{_num(s['logbus_records_per_s'])} records/s",
                f"same rows from Parquet: {_num(s['parquet_records_per_s'])} records/s",
                f"Parquet {s['parquet_over_logbus']}x faster; goal within 3x",
            )
        )
    if w := r.get("ws"):
        for rate in (1000, 10000):
            lat = w.get(f"latency_{rate}_per_s")
            if lat:
                out.append(
                    (
                        f"WebSocket produce → push latency at {_num(rate)} records/s, "
                        f"{lat['subscribers']} subscribers",
                        f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
                        f"p99.9 {lat['p99_9_ms']:.2f} ms",
                        "goal p99 ≤ 10 ms at 10,000/s" if rate == 10000 else "",
                        "",
                    )
                )
        for fmt in ("binary", "json"):
            fan = w.get(f"fanout_{fmt}")
            if fan:
                out.append(
                    (
                        f"WebSocket fan-out to {fan['subscribers']} subscribers ({fmt} frames)",
                        f"{_num(fan['records_per_s_total'])} records/s "
                        f"({_num(fan['megabytes_per_s_total'], 1)} MB/s)",
                        "",
                        "",
                    )
                )
    if t := r.get("typed_records"):
        shapes = [("produce", "produce", 0.7, f"{t['records_per_request']} records a request")]
        if "fetch_same_records_per_request" in t:  # results since session 10
            shapes += [
                ("fetch", "fetch", 0.8, "4 MiB a request (Avro: ~2x the records)"),
                ("fetch", "fetch_same", 0.8,
                 f"{_num(t['fetch_same_records_per_request'])} records a request"),
            ]  # fmt: skip
        else:
            shapes.append(("fetch", "fetch", 0.8, f"{t['records_per_request']} records a request"))
        for path, key, goal, shape in shapes:
            cpu = ""
            if f"avro_{key}_cpu_us" in t:  # the broker's CPU per record fetched
                cpu = (
                    f"; broker CPU {t[f'avro_{key}_cpu_us']:.2f} us/record against "
                    f"{t[f'json_{key}_cpu_us']:.2f} ({t[f'avro_vs_json_{key}_cpu']:.2f}x)"
                )
            out.append(
                (
                    f"typed Avro HTTP JSON {path}, {shape}",
                    f"{_num(t[f'avro_{key}_rps'])} records/s",
                    f"untyped JSON {path}: {_num(t[f'json_{key}_rps'])} records/s; goal ≥ {goal}x",
                    f"{t[f'avro_vs_json_{key}']:.2f}x{cpu}",
                )
            )
    return out


CLUSTER_GOAL_RATIO = 0.4


def _cluster_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Cluster mode: replicated produce against one broker, and leader failover."""
    c = r.get("cluster")
    if not c:
        return []
    t, f = c["throughput"], c["failover"]
    ratio = t["ratio"]
    spread = ", ".join(f"{x:.2f}" for x in t["ratio_samples"])
    session_ms = c["env"].get("LOGBUS_ZOOKEEPER_SESSION_TIMEOUT_MS", "?")
    return [
        (
            f"cluster produce: {c['brokers']} brokers on one machine ({c['cores']} cores), "
            f"RF {c['replication_factor']}, min.insync.replicas={c['min_insync_replicas']}, "
            f"acks=all, SDK send_many, {t['partitions']} partitions, 100 B",
            f"{_num(t['replicated_records_per_s'])} records/s "
            f"({_num(t['replicated_mb_per_s'], 1)} MB/s)",
            f"one broker, acks=1: {_num(t['single_records_per_s'])} records/s "
            f"({_num(t['single_mb_per_s'], 1)} MB/s)",
            f"{ratio:.2f}x (runs: {spread}; ratio of medians "
            f"{t.get('ratio_of_medians', ratio):.2f}); goal ≥ {CLUSTER_GOAL_RATIO} (Kafka 2014: 0.51); "
            + ("met" if ratio >= CLUSTER_GOAL_RATIO else "missed"),
        ),
        (
            f"leader failover, kill -9 under an acks=all producer ({f['kills']} kills): "
            "kill → first acknowledged write",
            f"p50 {_num(f['ack_p50_ms'])} ms, p99 {_num(f['ack_p99_ms'])} ms, "
            f"max {_num(f['ack_max_ms'])} ms",
            f"ZooKeeper session timeout {_num(int(session_ms))} ms",
            f"new leader in /metadata: p50 {_num(f['metadata_p50_ms'])} ms, "
            f"max {_num(f['metadata_max_ms'])} ms",
        ),
    ]


def _robustness_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Abusive clients under the listener's limits (issue #12)."""
    b = r.get("robustness")
    if not b:
        return []
    base = b["baseline"]

    def latency(x: dict[str, Any]) -> str:
        return f"normal client p50 {x['p50_ms']} ms, p99 {x['p99_ms']} ms"

    base_text = f"alone: RSS {_num(base['rss_mb'])} MB, {latency(base)}"
    idle, trickle, ws = b["idle_5000"], b["trickle_1000"], b["ws_unread_1000"]
    return [
        (
            "broker with 5,000 idle connections",
            f"RSS {_num(idle['rss_mb'])} MB; {latency(idle)}",
            base_text,
            f"+{_num(idle['rss_mb'] - base['rss_mb'])} MB",
        ),
        (
            "broker with 1,000 clients trickling a header byte a second",
            f"RSS {_num(trickle['rss_mb'])} MB; {latency(trickle)}",
            base_text,
            f"{trickle['closed_by_header_timeout_within_25s']} of 1,000 closed by the "
            "20 s header timeout",
        ),
        (
            "broker with 1,000 WebSocket subscribers that never read",
            f"RSS {_num(ws['rss_mb'])} MB ({_num(ws['rss_after_mb'])} MB after they left); "
            f"{latency(ws)}",
            base_text,
            f"{ws['failed_handshakes']} failed handshakes",
        ),
        (
            "time to refuse a request declaring a body over max_request_bytes (413)",
            f"{b['refuse_oversized_ms']} ms",
            "",
            "",
        ),
    ]


EDGE_NAMES = {
    "produce_1_keyed": "1 keyed JSON record per request, acks=1",
    "produce_1_unkeyed": "1 unkeyed JSON record per request, acks=1",
    "produce_10": "10 keyed JSON records per request",
    "produce_100": "100 keyed JSON records per request",
    "fetch_small": "JSON fetch of ~20 records",
    "ws_produce_1_keyed": "WebSocket produce, 1 keyed record per message (Python client)",
}


def _edge_cpu(f: dict[str, Any]) -> str:
    """The broker's CPU per request, when the figure has it (older results do not)."""
    cpu = f.get("broker_cpu_us_per_request")
    return "" if cpu is None else f", broker CPU {cpu} us/request"


def _edge_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Small requests under wrk (issue #14), against the same run's /healthz."""
    e = r.get("http_edge")
    if not e:
        return []
    out: list[tuple[str, str, str, str]] = []
    for key in sorted(k for k in e if k.startswith("c")):
        at, conns = e[key], key[1:]
        floor = at["healthz"]
        for name, label in EDGE_NAMES.items():
            f = at.get(name)
            if f is None:
                continue
            out.append(
                (
                    f"HTTP edge, wrk {conns} connections: {label}",
                    f"{_num(f['requests_per_s'])} req/s, p50 {f['p50_ms']} ms, "
                    f"p99 {f['p99_ms']} ms" + _edge_cpu(f),
                    f"/healthz: {_num(floor['requests_per_s'])} req/s",
                    f"{f['ratio_to_healthz']}x",
                )
            )
    joined = e.get("group_commit_off_c64")
    if joined:
        f = joined["produce_1_keyed"]
        out.append(
            (
                "HTTP edge, wrk 64 connections: 1 keyed JSON record, LOGBUS_GROUP_COMMIT_INLINE=false",
                f"{_num(f['requests_per_s'])} req/s, p50 {f['p50_ms']} ms, p99 {f['p99_ms']} ms"
                + (
                    f", {f['appends_per_request']} appends per request"
                    if "appends_per_request" in f
                    else ""
                )
                + _edge_cpu(f),
                f"/healthz: {_num(joined['healthz']['requests_per_s'])} req/s",
                f"{f['ratio_to_healthz']}x",
            )
        )
    return out


def _isolation_rows(i: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """read_committed vs read_uncommitted over one transactional topic (bench/isolation.py)."""
    if not i:
        return []
    topic = i["topic"]
    what = (
        f"{_num(topic['records'])} records in interleaved transactions, "
        f"{_num(topic['aborted'])} aborted"
    )
    out = []
    for flavour, label in (
        ("sdk_columns", "Consumer.poll_columns"),
        ("sdk_poll", "Consumer.poll"),
        ("json_fetch", "HTTP JSON fetch"),
    ):
        c, u = i[f"{flavour}_committed"], i[f"{flavour}_uncommitted"]
        span = what if flavour != "json_fetch" else f"its first {_num(c['offsets'])} offsets"
        out.append(
            (
                f"read_committed consume, {label} ({span})",
                f"{_num(c['offsets_per_s'])} offsets/s ({_num(c['records_per_s'])} records/s)",
                f"read_uncommitted, same run: {_num(u['offsets_per_s'])} offsets/s",
                f"{i[f'{flavour}_ratio']}x",
            )
        )
    return out


def _txn_json_rows(t: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """The JSON produce in a transaction against a plain acks=all one (bench/transactions.py)."""
    if not t:
        return []
    return [
        (
            "JSON produce in a transaction, 10 records a request, one client",
            f"{_num(t['transactional_requests_per_s'])} requests/s",
            f"plain acks=all JSON produce, same run: "
            f"{_num(t['plain_acks_all_requests_per_s'])} requests/s",
            f"{t['ratio']:.2f}x",
        )
    ]


SECURITY_FIGURES = (
    ("produce", "binary produce, 1 MiB batches", "MB/s"),
    ("fetch", "binary fetch, 8 MiB fetches", "MB/s"),
    ("json_produce", "JSON produce, 1,000 records/request", "records/s"),
    ("json_fetch", "JSON fetch, 1 MiB fetches", "records/s"),
)


def _security_figure(t: dict[str, Any], name: str, key: str, unit: str) -> str:
    """``rate unit; broker CPU x s/GB`` (or ``s/M records``) of one broker's figure."""
    binary = unit == "MB/s"
    rate = t[f"{name}_{key}_{'mb_per_s' if binary else 'records_per_s'}"]
    cpu = t[f"{name}_{key}_broker_cpu_s_per_{'gb' if binary else 'm'}"]
    return f"{_num(rate)} {unit}; broker CPU {cpu:.2f} {'s/GB' if binary else 's/M records'}"


def _security_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """TLS and authentication + authorization against plaintext, anonymous (issue #15),
    three brokers in the same run (bench/tls.py)."""
    t = r.get("tls")
    if not t or "json_fetch_auth_cpu_ratio" not in t:
        return []
    out: list[tuple[str, str, str, str]] = []
    for key, label, unit in SECURITY_FIGURES:
        plain = _security_figure(t, "plain", key, unit)
        for name, what in (("tls", "TLS"), ("auth", "Basic + ACL authorizer")):
            out.append(
                (
                    f"{what}: {label}",
                    _security_figure(t, name, key, unit),
                    f"plaintext, anonymous: {plain}",
                    f"rate {t[f'{key}_{name}_ratio']:.2f}x, broker CPU "
                    f"{t[f'{key}_{name}_cpu_ratio']:.2f}x",
                )
            )
    return out


def _kafka_door_rows(k: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    """The Kafka door (issue 19): librdkafka against the SDK over HTTP, same broker, same run."""
    if not k:
        return []
    out = [
        (
            f"Kafka door: librdkafka produce, {k['value_bytes']} B, acks=1",
            f"{_num(k['rdkafka_produce'])} records/s",
            f"SDK over HTTP: {_num(k['sdk_produce_send'])} records/s; goal ≥ 500,000",
            f"{k['produce_ratio']}x",
        ),
        (
            f"Kafka door: librdkafka consume, {k['value_bytes']} B",
            f"{_num(k['rdkafka_consume'])} records/s",
            f"SDK over HTTP: {_num(k['sdk_consume'])} records/s; goal ≥ 1,000,000",
            f"{k['consume_ratio']}x",
        ),
    ]
    if "rdkafka_fetch_gb_s" in k:
        out += [
            (
                f"Kafka door: librdkafka fetch, {k['fetch_value_bytes'] // 1024} KiB records",
                f"{k['rdkafka_fetch_gb_s']:.2f} GB/s",
                f"SDK over HTTP: {k['sdk_fetch_gb_s']:.2f} GB/s; goal ≥ 1 GB/s",
                f"{k['fetch_ratio']}x",
            ),
            (
                f"Kafka door: librdkafka produce latency at {_num(k['latency_rate'])} records/s",
                f"p50 {k['rdkafka_produce_p50_ms']:.2f} ms, p99 "
                f"{k['rdkafka_produce_p99_ms']:.2f} ms",
                f"SDK over HTTP (perf produce): p50 {k['sdk_produce_p50_ms']:.2f} ms, "
                f"p99 {k['sdk_produce_p99_ms']:.2f} ms",
                f"SDK p99 / librdkafka p99: {k['produce_p99_ratio']}x",
            ),
        ]
    return out


def table(r: dict[str, Any]) -> str:
    lines = ["| figure | Logbus | baseline / goal | ratio |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(r)]
    return "\n".join(lines)


# Everything after this line of RESULTS.md is kept as it is when the file is written again.
HAND_RECORDED = "<!-- hand-recorded figures below: bench/report.py keeps them -->"


def write_results_md(r: dict[str, Any], path: Path) -> None:
    m = r["machine"]
    machine = "\n".join(f"- `{k}`: {v}" for k, v in m.items())
    rerun = r.get("section_dates", {})
    if rerun:
        machine += (
            "\n- sections rerun alone since (`python -m bench.run --only NAME`), on the same "
        )
        machine += "machine: " + ", ".join(f"{name} on {date}" for name, date in rerun.items())
    text = f"""# Benchmark results

Measured by `make bench` (`python -m bench.run`) on {m["date"]}. Every figure is
the median of several runs (raw samples in `bench/results.json`); the Redis
Streams baseline (redis-py, Debian's `redis-server`, persistence off as
Logbus's page-cache default) is measured in the same run. These machines are
shared and noisy: trust the ratios more than the absolutes.

Machine:
{machine}

{table(r)}

How each figure is taken:
- engine: `python -m bench.engine` — `Log.append` of 1 MiB batches (validate,
  CRC-32C, stamp, one write), sequential `Log.read` through `os.pread`, and
  median `Log.read(random offset)` latency in logs of 10 and 10,000 segments.
- HTTP produce: `bench/http_produce.py` — a `logbus serve` subprocess, two
  client threads on keep-alive connections posting the same prebuilt body.
- HTTP fetch: `python -m bench.fetch` — a ~256 MB cached partition read by one
  client over loopback, from a broker with zero-copy (`os.sendfile`) and one
  with `LOGBUS_ZEROCOPY=0` (pread + send), on the same data.
- SDK: `python -m bench.sdk` — the Python producer (`send` per record with
  null keys, `send` with one of 1,000 keys and a delivery callback per record,
  `logbus perf produce` with and without `--keys 1000` through its own
  function, taken round-robin, and `send_many` over lists) and consumer
  (`poll` and `poll_columns`), 4 partitions; end-to-end latency is `logbus perf e2e`'s loop at 10,000
  records/s on one partition (receive time minus the send time stamped in each value),
  median of each percentile over the runs.
- compaction: `python -m bench.compaction` — one cleaner pass over a log
  where every key was written ten times (map build, recopy, crash-safe swap,
  fsyncs included).
- groups: `python -m bench.groups` — 1,000 groups committing at once over
  HTTP, and the time from a new member's first heartbeat until all 11
  members of a group hold their final assignment (1 s heartbeat interval).
- WebSocket: `python -m bench.ws` — produce over `/ws/produce` at a fixed
  rate, receive on 10 subscribers in separate processes; fan-out of one
  partition to 100 subscribers.
- Spark: `python -m bench.spark` — `spark.read.format("logbus")` of a
  4-partition topic on `local[2]` into a no-op sink, beside Spark reading the
  same rows from Parquet (best of 2 runs each).
- cluster: `python -m bench.cluster` — a real ZooKeeper and three brokers
  (the e2e harness's timings: ZooKeeper session 2 s, replica lag 2 s) on
  this machine's cores, shared with ZooKeeper and the producer. Throughput:
  `send_many` for ~10 s into replication factor 3, `min.insync.replicas=2`,
  `acks=all`, alternating with one plain broker at `acks=1`, same producer
  settings; median of the ratios of adjacent pairs of runs. Failover: `kill -9` of a one-partition
  topic's leader while a producer writes one `acks=all` record at a time;
  the time from the kill until a write sent after it is acknowledged (and
  until `/metadata` on a survivor names a new leader); the broker is
  restarted and back in the ISR before the next kill.
- HTTP edge: `python -m bench.http_edge` — `wrk -t2` at 8 and 64 keep-alive
  connections, each figure the median of 3 runs of 5 s taken in turn with the
  others (the ratio: the median of each run's ratio to the same round's
  `/healthz`), with the broker's CPU time per request, against one broker with
  default settings:
  `/healthz` (the same run's baseline), one-record JSON produce keyed and
  unkeyed, 10 and 100 records per request, a JSON fetch of ~20 records;
  WebSocket produce of one keyed record per message from a Python client
  (`websockets`, one process, closed loop per connection); and the keyed
  one-record produce at 64 connections against a second broker with
  `LOGBUS_GROUP_COMMIT_INLINE=false` (each small request appended alone; the
  default joins them), with its appends per request.
- robustness: `python -m bench.robustness` — one broker with default limits;
  5,000 idle connections, 1,000 clients trickling a request head a byte a
  second, 1,000 WebSocket subscribers that never read, each held while a
  normal client (its own address) loops a keyed one-record produce and a
  small fetch; broker RSS from `/proc`; the time to answer 413 to a head
  declaring an oversized body.
- TLS and authentication + authorization: `python -m bench.tls` — three brokers
  in one run, driven in turn each round (7 rounds; figures are medians, ratios
  the median of each round's ratio): plaintext and
  anonymous (the baseline), TLS (trustme certificate, TLS 1.3), and plaintext
  with `authentication=basic`, `authorizer=acl`, every request carrying the
  Basic credentials of a user holding exactly READ and WRITE on the topics.
  Binary produce (~1 MiB batches, 2 in flight) and fetch (a 256 MiB partition
  in 8 MiB fetches: `sendfile` in plaintext, read + SSL write over TLS); JSON
  produce (1,000 100-byte values a request, 2 in flight) and fetch (100,000
  records in 1 MiB fetches, parsed by the client). `http.client` on the same
  two cores, so the TLS rate counts both ends' encryption; the broker's CPU
  seconds per GB (or per million records), from `/proc`, count the broker's
  alone and hold steadier than rates on a loaded machine.

![Logbus vs Redis Streams](chart.png)
"""
    if path.exists() and HAND_RECORDED in (old := path.read_text()):
        # Figures measured by hand (before/after pairs of one change) stay below the marker.
        text += "\n" + HAND_RECORDED + old.split(HAND_RECORDED, 1)[1]
    path.write_text(text)
    if README.exists():
        readme = README.read_text()
        readme = re.sub(
            r"(<!-- bench-table:start -->\n).*?(\n<!-- bench-table:end -->)",
            lambda mt: mt.group(1) + table(r) + mt.group(2),
            readme,
            flags=re.S,
        )
        README.write_text(readme)


def write_chart(r: dict[str, Any], path: Path) -> None:
    """Records/s of Logbus paths beside the Redis baseline, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, float, str]] = []
    redis = r.get("redis", {})
    if "redis_xadd_records_per_s" in redis:
        bars.append(("Redis XADD\n(pipelined)", redis["redis_xadd_records_per_s"], "#999999"))
    if "redis_xread_records_per_s" in redis:
        bars.append(("Redis XREAD", redis["redis_xread_records_per_s"], "#bbbbbb"))
    if h := r.get("http_produce"):
        bars.append(("Logbus JSON\nproduce", h["json_produce_records_per_s"], "#1f77b4"))
    if s := r.get("sdk"):
        for key, label, color in (
            ("produce_send_records_per_s", "Logbus SDK\nsend", "#2ca02c"),
            ("produce_send_many_records_per_s", "Logbus SDK\nsend_many", "#2ca02c"),
            ("consume_records_per_s", "Logbus SDK\npoll", "#98df8a"),
            ("consume_columns_records_per_s", "Logbus SDK\npoll_columns", "#98df8a"),
        ):
            if key in s:
                bars.append((label, s[key], color))
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.set_ylabel("records/s (100-byte values)")
    ax.set_title("Logbus vs Redis Streams, one machine, same run")
    for i, (_, v, _) in enumerate(bars):
        ax.text(i, v, f"{v / 1000:,.0f}k", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    data = json.loads((HERE / "results.json").read_text())
    write_results_md(data, HERE / "RESULTS.md")
    write_chart(data, HERE / "chart.png")
