"""PromQL read by a real parser (promql-parser on PyPI: the Rust promql-parser crate, whose
grammar follows Prometheus'): which series an expression reads. The rules' behaviour is
checked by promtool itself (test_chart_alerts_promtool.py)."""

from __future__ import annotations

import promql_parser


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """Every series selector of ``expr`` as (metric name, {label: value} of its equality
    matchers); raises ValueError if ``expr`` is not PromQL."""
    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name, {m.name: m.value for m in node.matchers.matchers
                                      if m.op == promql_parser.MatchOp.Equal}))
    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def metric_names(expr: str) -> set[str]:
    return {name for name, _ in selectors(expr)}


def served_names(metrics_text: str) -> set[str]:
    """What a Prometheus scraping ``metrics_text`` stores series under (a counter's _total,
    a histogram's _bucket, _sum and _count), families with no samples yet included."""
    from prometheus_client.parser import text_string_to_metric_families
    served = set()
    for f in text_string_to_metric_families(metrics_text):
        served |= {f.name} | {s.name for s in f.samples}
        if f.type == "counter":
            served.add(f.name + "_total")
        if f.type == "histogram":
            served |= {f.name + s for s in ("_bucket", "_sum", "_count")}
    return served


# Series Prometheus itself adds to every target it scrapes.
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
