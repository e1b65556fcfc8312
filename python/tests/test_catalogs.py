"""The Python-visible lists agree with the kernel's own catalogs.

The binding exports the core's lists as they are (``ERROR_CODES`` from ``ErrorCode::ALL``,
``PREDICATES`` from ``Predicate::ALL``, ``EVENT_KINDS`` from ``Event::KINDS``,
``CONFIG_FIELDS`` from ``Config::field_names``). The stubs (klock/_core.pyi) spell some of
them out again for type checkers, as ``Literal`` types, a ``TypedDict`` and docstrings; these
tests fail when the stubs and the kernel disagree.
"""

from __future__ import annotations

import ast
import pathlib
import re

import klock
from klock import _core

STUB = ast.parse(pathlib.Path(klock.__file__).with_name("_core.pyi").read_text(encoding="utf-8"))


def literal(name: str) -> tuple[str, ...]:
    """The strings of the stub's ``name = Literal[...]``."""
    for node in STUB.body:
        if isinstance(node, ast.Assign) and [
            t.id for t in node.targets if isinstance(t, ast.Name)
        ] == [name]:
            assert isinstance(node.value, ast.Subscript), ast.dump(node.value)
            items = (
                node.value.slice.elts
                if isinstance(node.value.slice, ast.Tuple)
                else [node.value.slice]
            )
            return tuple(str(item.value) for item in items if isinstance(item, ast.Constant))
    raise AssertionError(f"the stub has no {name}")


def stub_class(name: str) -> ast.ClassDef:
    found = [n for n in STUB.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"the stub has no class {name}"
    return found[0]


def test_predicates_are_the_kernels_in_matrix_order() -> None:
    assert _core.PREDICATES == (
        "PROVIDES",
        "CONSUMES",
        "MUTATES",
        "DELETES",
        "DEPENDS_ON",
        "RENAMES",
    )
    assert literal("_Predicate") == _core.PREDICATES
    for predicate in _core.PREDICATES:
        assert _core.parse_intent(f"{predicate.lower()} FILE:/x") == (predicate, "FILE:/x")


def test_event_kinds_are_the_kernels() -> None:
    assert len(_core.EVENT_KINDS) == 8 and {"GRANTED", "ACQUIRED", "RELEASED"} <= set(
        _core.EVENT_KINDS
    )
    assert literal("_EventName") == _core.EVENT_KINDS


def test_config_fields_are_the_kernels() -> None:
    assert _core.CONFIG_FIELDS[0] == "policy" and len(set(_core.CONFIG_FIELDS)) == len(
        _core.CONFIG_FIELDS
    )
    assert set(_core.Kernel().config) == set(_core.CONFIG_FIELDS)
    typed = [
        n.target.id
        for n in stub_class("_Config").body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    assert tuple(typed) == _core.CONFIG_FIELDS[1:]


def test_error_names_in_the_stubs_are_the_kernels() -> None:
    codes = _core.ERROR_CODES
    assert len(set(codes.values())) == len(codes) and all(100 <= c < 500 for c in codes.values())
    heartbeat = literal("_HeartbeatStatus")
    assert heartbeat[0] == "OK" and set(heartbeat[1:]) <= set(codes)
    # Each exception class's docstring lists exactly the codes of its family.
    for cls, family in [
        ("InvalidInput", 1),
        ("UnknownId", 2),
        ("StateError", 3),
        ("QuotaExceeded", 4),
    ]:
        doc = ast.get_docstring(stub_class(cls)) or ""
        match = re.search(rf"Codes {family}xx: ([A-Z_, \n]+)\.", doc)
        assert match, doc
        listed = [name.strip() for name in match.group(1).split(",")]
        assert listed == [
            n for n, c in sorted(codes.items(), key=lambda i: i[1]) if c // 100 == family
        ]
        assert issubclass(getattr(_core, cls), _core.KlockError)
