"""YAML bodies, under the bounds of bodies.py.

YAML needs more care than JSON. Its parser composes nodes recursively (a deep document
exhausts the stack), and an alias reuses a node without copying it, so a kilobyte of
nested aliases stands for billions of nodes once anything walks or serialises the result.
The loader below counts, while composing, the nodes each alias stands for and refuses the
document once more than ALIAS_BUDGET nodes have been reached through aliases: the work and
memory spent before the refusal are bounded by that budget, not by the expansion.
"""

import yaml

from .bodies import MAX_DEPTH, ShapeError, as_json_data

ALIAS_BUDGET = 10_000


def parse_yaml(text):
    try:
        data = yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as e:
        raise ShapeError(f"body is not valid YAML: {str(e).splitlines()[0]}") from None
    return as_json_data(data)


def load_yaml(stream):
    """A YAML file from outside (a repository's manifest) under the same bounds; raises
    yaml.YAMLError or ShapeError."""
    return as_json_data(yaml.load(stream, Loader=_BoundedLoader))


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose scanner and composer stop at MAX_DEPTH levels, and whose composer
    stops once aliases stand for more than ALIAS_BUDGET nodes."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._shape = {}          # node -> (nodes it stands for, levels under it)
        self._through_aliases = 0

    # The scanner looks ahead over every open flow collection ("[[[["), in time quadratic
    # in their number, before the composer sees the first one: stop it there too.
    def fetch_flow_collection_start(self, token_class):
        self._check_scanner_depth(self.flow_level)
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column):
        self._check_scanner_depth(len(self.indents))
        return super().add_indent(column)

    def _check_scanner_depth(self, levels):
        if levels >= MAX_DEPTH:
            raise yaml.scanner.ScannerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", self.get_mark())

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                if target not in self._shape:
                    raise yaml.composer.ComposerError(
                        None, None, "an alias refers to a node that contains it",
                        event.start_mark)
                size, height = self._shape[target]
                self._through_aliases += size
                if self._through_aliases > ALIAS_BUDGET:
                    raise yaml.composer.ComposerError(
                        None, None, f"aliases stand for more than {ALIAS_BUDGET} nodes",
                        event.start_mark)
                self._check_height(self._depth + height, event)
            return super().compose_node(parent, index)
        self._depth += 1
        self._check_height(self._depth, self.peek_event())
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
            else [])
        shapes = [self._shape[child] for child in children]
        self._shape[node] = (1 + sum(s for s, _ in shapes),
                             1 + max((h for _, h in shapes), default=0))
        return node

    def _check_height(self, levels, event):
        if levels > MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
