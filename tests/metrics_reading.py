"""Reading metrics the way a scraper does: the registry's text exposition
(prometheus_client.generate_latest), parsed with prometheus_client's own parser."""

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families


def samples(metric, registry=REGISTRY):
    """[(labels dict, value)] of every sample called `metric` in the exposition."""
    text = generate_latest(registry).decode()
    return [(dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == metric]


def value(metric, registry=REGISTRY, **labels):
    """The value of the one sample `metric` whose labels include `labels`, or None."""
    found = [v for got, v in samples(metric, registry)
             if all(got.get(k) == str(w) for k, w in labels.items())]
    assert len(found) <= 1, (metric, labels, found)
    return found[0] if found else None
