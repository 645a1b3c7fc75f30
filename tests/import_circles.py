"""An import-linter contract type that forbids import circles between modules, at any depth.

import-linter's own ``acyclic_siblings`` looks at packages (a cycle between ``engine.admission``
and the ``engine.policy`` package counts even when no two modules import each other back); usher
wants the finer rule: no module reaches itself through its imports, type-only ones included. It
lives under tests/ because import-linter is a test dependency; ``.importlinter`` names it, and
``lint-imports`` finds it on the path tests/test_import_contracts.py gives it.
"""

from __future__ import annotations

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def circles(graph, packages: set[str]) -> list[list[str]]:
    """Every strongly connected set of two or more modules under ``packages`` (Tarjan's, iterative)."""
    modules = sorted(m for m in graph.modules if any(m == p or m.startswith(p + ".") for p in packages))
    inside = set(modules)
    edges = {m: sorted(set(graph.find_modules_directly_imported_by(m)) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


class AcyclicContract(Contract):
    """``packages``: the modules (with their descendants) among which no import circle may exist."""

    type_name = "acyclic"
    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph, verbose: bool) -> ContractCheck:
        found = circles(graph, set(self.packages))  # type: ignore[arg-type]
        lines = []
        for group in found:
            members = set(group)
            edges = []
            for importer in group:
                for imported in sorted(set(graph.find_modules_directly_imported_by(importer)) & members):
                    at = sorted(d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported))
                    edges.append(f"{importer} -> {imported} (l.{', '.join(map(str, at))})")
            lines.append((group, edges))
        return ContractCheck(kept=not found, metadata={"circles": lines})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for group, edges in check.metadata["circles"]:
            output.print_error(f"A circle of {len(group)} modules: {', '.join(group)}")
            output.new_line()
            for edge in edges:
                output.indent_cursor()
                output.print(edge)
            output.new_line()
