// The dashboard: /api/stats polled every second, as tiles (now), charts (the last
// minute) and a table per model (a server) or per worker (a router).

import { api } from "./api.js";
import { LineChart } from "./chart.js";
import { fillTable, h, ms, number, percent, Poller } from "./dom.js";

const $ = (id) => document.getElementById(id);
const POLL_SECONDS = 1;

const sum = (series) => (Array.isArray(series) ? series.reduce((n, s) => n + s.value, 0) : series ?? 0);

// The q-quantile of the observations between two cumulative bucket lists (Prometheus's histogram_quantile).
function windowQuantile(q, now, before) {
  if (!now) return null;
  const buckets = now.buckets.map(([le, n], i) => [le === "+Inf" ? Infinity : le, n - (before?.buckets[i]?.[1] ?? 0)]);
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  let [lowBound, lowCount] = [0, 0];
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === Infinity) return lowBound;
      return count === lowCount ? bound : lowBound + ((bound - lowBound) * (rank - lowCount)) / (count - lowCount);
    }
    [lowBound, lowCount] = [bound, count];
  }
  return lowBound;
}

// Requests answered, less the console's own (its files and these polls).
function answered(series) {
  return (series ?? []).filter((s) => s.labels.route !== "/api/stats" && !s.labels.route.startsWith("/ui"));
}

// Per model, from the request cards of the last finished requests (the metrics' histograms are not per model).
function latencyByModel(cards) {
  const by = {};
  for (const c of cards) {
    if (c.time_to_first_token === null) continue;
    const m = (by[c.model] ??= { ttft: [], tpot: [] });
    m.ttft.push(c.time_to_first_token);
    const later = c.usage.completion_tokens - 1;
    if (later > 0) m.tpot.push((c.duration - c.time_to_first_token) / later);
  }
  return by;
}

function pair(values) {
  if (!values?.length) return "–";
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return `${ms(at(0.5))} / ${ms(at(0.9))}`;
}

function tile(id, label) {
  return h("div", { class: "tile" }, h("span", { class: "label", id: `${id}-label`, text: label }),
    h("output", { id, "aria-labelledby": `${id}-label`, text: "–" }));
}

function rate(now, before, dt) {
  return before === undefined || dt <= 0 ? null : Math.max(0, (now - before) / dt);
}

class ServerDashboard {
  constructor() {
    this.tiles = [
      ["stat-tokens-per-second", "Tokens per second"], ["stat-running", "Running"], ["stat-waiting", "Waiting"],
      ["stat-kv", "KV cache in use"], ["stat-hit-rate", "Prefix-cache hit rate"],
      ["stat-generated", "Tokens generated"], ["stat-requests", "Requests answered"],
      ["stat-ttft", "Time to first token p50 / p90 / p99"], ["stat-tpot", "Time per output token p50 / p90 / p99"],
    ];
    this.charts = {
      speed: new LineChart("Tokens per second", [{ name: "generated" }]),
      load: new LineChart("Requests", [{ name: "running" }, { name: "waiting" }], { format: (v) => v.toFixed(0) }),
      cache: new LineChart("KV cache and prefix cache", [{ name: "KV in use", unit: "" }, { name: "hit rate" }],
        { max: 1, format: percent }),
      latency: new LineChart("Latency (each second's requests)", [{ name: "TTFT p50" }, { name: "TTFT p90" },
        { name: "TPOT p50" }], { format: (v) => ms(v) }),
    };
  }

  update(stats, previous, cards) {
    const dt = previous ? stats.time - previous.time : 0;
    const before = Object.fromEntries((previous?.models ?? []).map((m) => [m.name, m]));
    const latency = latencyByModel(cards ?? []);
    const models = stats.models.map((m) => ({
      ...m, speed: rate(m.generation_tokens_total, before[m.name]?.generation_tokens_total, dt),
    }));
    const speeds = models.map((m) => m.speed).filter((s) => s !== null);
    const speed = previous ? speeds.reduce((a, b) => a + b, 0) : null;
    const running = models.reduce((n, m) => n + m.running, 0);
    const waiting = models.reduce((n, m) => n + m.waiting, 0);
    const used = models.reduce((n, m) => n + m.kv_blocks_used, 0);
    const total = models.reduce((n, m) => n + m.kv_blocks_total, 0);
    const queries = models.reduce((n, m) => n + m.prefix_cache_queries, 0);
    const hits = models.reduce((n, m) => n + m.prefix_cache_hits, 0);
    const kv = total ? used / total : null;
    const hitRate = queries ? hits / queries : null;
    const ttft = stats.histograms.inferd_time_to_first_token_seconds;
    const tpot = stats.histograms.inferd_time_per_output_token_seconds;
    const set = (id, text) => { $(id).textContent = text; };
    set("stat-tokens-per-second", number(speed, 1));
    set("stat-running", number(running));
    set("stat-waiting", number(waiting));
    set("stat-kv", percent(kv));
    set("stat-hit-rate", percent(hitRate));
    set("stat-generated", number(models.reduce((n, m) => n + m.generation_tokens_total, 0)));
    set("stat-requests", stats.metrics ? number(sum(answered(stats.counters.inferd_requests))) : "–");
    set("stat-ttft", ttft ? [ttft.p50, ttft.p90, ttft.p99].map(ms).join(" / ") : "–");
    set("stat-tpot", tpot ? [tpot.p50, tpot.p90, tpot.p99].map(ms).join(" / ") : "–");
    this.charts.speed.push(speed);
    this.charts.load.push(running, waiting);
    this.charts.cache.push(kv, hitRate);
    const prev = previous?.histograms ?? {};
    this.charts.latency.push(windowQuantile(0.5, ttft, prev.inferd_time_to_first_token_seconds),
      windowQuantile(0.9, ttft, prev.inferd_time_to_first_token_seconds),
      windowQuantile(0.5, tpot, prev.inferd_time_per_output_token_seconds));
    $("dashboard-note").textContent = stats.metrics ? "" :
      "Request counts and latency percentiles need the server started with --metrics; engine numbers are shown without it.";
    $("dashboard-table-title").textContent = "Per model";
    fillTable($("dashboard-table"), [
      { title: "Model", cell: (m) => m.name },
      { title: "Running", cell: (m) => `${m.running} of ${m.max_running}` },
      { title: "Waiting", cell: (m) => m.waiting },
      { title: "KV cache", cell: (m) => percent(m.kv_usage) },
      { title: "Prefix hits", cell: (m) => percent(m.prefix_cache_queries ? m.prefix_cache_hit_rate : null) },
      { title: "Tokens/s", cell: (m) => number(m.speed, 1) },
      { title: "Generated", cell: (m) => number(m.generation_tokens_total) },
      { title: "Preemptions", cell: (m) => number(m.preemptions) },
      { title: "TTFT p50 / p90, recent", cell: (m) => pair(latency[m.name]?.ttft) },
      { title: "TPOT p50 / p90, recent", cell: (m) => pair(latency[m.name]?.tpot) },
    ], models, "No chat model is loaded.");
  }
}

class RouterDashboard {
  constructor() {
    this.tiles = [
      ["stat-routed-per-second", "Routed per second"], ["stat-in-flight", "In flight"],
      ["stat-routable", "Workers routable"], ["stat-routed", "Requests routed"], ["stat-retries", "Retries"],
      ["stat-stream-errors", "Streams cut"],
    ];
    this.charts = {
      routed: new LineChart("Routed per second", [{ name: "routed" }]),
      inFlight: new LineChart("In flight", [{ name: "requests" }], { format: (v) => v.toFixed(0) }),
    };
  }

  update(stats, previous) {
    const dt = previous ? stats.time - previous.time : 0;
    const routed = sum(stats.counters.inferd_router_requests);
    const perSecond = previous ? rate(routed, sum(previous.counters.inferd_router_requests), dt) : null;
    const inFlight = stats.workers.reduce((n, w) => n + w.in_flight, 0);
    const set = (id, text) => { $(id).textContent = text; };
    set("stat-routed-per-second", number(perSecond, 1));
    set("stat-in-flight", number(inFlight));
    set("stat-routable", number(stats.gauges.inferd_router_workers_routable ?? null));
    set("stat-routed", stats.metrics ? number(routed) : "–");
    set("stat-retries", stats.metrics ? number(sum(stats.counters.inferd_router_retries)) : "–");
    set("stat-stream-errors", stats.metrics ? number(sum(stats.counters.inferd_router_stream_errors)) : "–");
    this.charts.routed.push(perSecond);
    this.charts.inFlight.push(inFlight);
    $("dashboard-note").textContent = stats.metrics ? "" : "Routing counts need the router's metrics (on unless --no-metrics).";
    $("dashboard-table-title").textContent = "Per worker";
    const byWorker = {};
    for (const s of Array.isArray(stats.counters.inferd_router_requests) ? stats.counters.inferd_router_requests : []) {
      byWorker[s.labels.worker] = (byWorker[s.labels.worker] ?? 0) + s.value;
    }
    fillTable($("dashboard-table"), [
      { title: "Worker", cell: (w) => w.id },
      { title: "State", cell: (w) => w.state },
      { title: "In flight", cell: (w) => w.in_flight },
      { title: "Breaker", cell: (w) => w.breaker },
      { title: "Routed", cell: (w) => number(byWorker[w.id] ?? 0) },
    ], stats.workers, "No workers.");
  }
}

export function dashboardPage(role) {
  const view = role === "router" ? new RouterDashboard() : new ServerDashboard();
  let previous = null;
  let cards = null;  // the last finished requests' cards, for per-model latency: drawn one poll later
  const poller = new Poller(async () => {
    const asked = role === "server" ? api("v1/requests?state=done").then((r) => r.data, () => null) : null;
    const stats = await api("api/stats");
    view.update(stats, previous, cards);
    if (!previous) performance.mark("console:first-stats");  // when the numbers first showed (benchmarks read it)
    previous = stats;
    cards = (await asked) ?? cards;
  }, POLL_SECONDS);
  return {
    mount() {
      $("dashboard-tiles").replaceChildren(...view.tiles.map(([id, label]) => tile(id, label)));
      $("dashboard-charts").replaceChildren(...Object.values(view.charts).map((c) => c.element));
    },
    show() { poller.start(); },
    hide() { poller.stop(); },
  };
}
