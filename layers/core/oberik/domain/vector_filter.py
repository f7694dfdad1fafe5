"""The metadata filter language of vector queries, evaluated in Python.

It is the language Amazon S3 Vectors' QueryVectors accepts, so one filter works against either store: the
in-process store (local/dev) evaluates it here, and the tests answer moto's missing QueryVectors with this
same evaluator.

- ``{"field": value}`` is ``{"field": {"$eq": value}}``; several fields in one object must all hold.
- ``$eq $ne $in $nin`` compare strings, numbers and booleans; when the stored value is a list (``tags``),
  ``$eq`` and ``$in`` match if any element matches, ``$ne`` and ``$nin`` if no element does.
- ``$gt $gte $lt $lte`` compare numbers.
- ``$exists`` (true / false) asks whether the field is present at all.
- ``$and`` / ``$or`` take a non-empty list of filters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oberik.domain.errors import Invalid

COMPARISONS = frozenset({"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"})
LOGICAL = frozenset({"$and", "$or"})

Filter = Mapping[str, Any]


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and value is not None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def validate(flt: Filter | None) -> None:
    """Raise `Invalid` (field "filter") for anything the language does not have."""
    if flt is None:
        return
    if not isinstance(flt, Mapping) or not flt:
        raise Invalid("A vector filter must be a non-empty JSON object.", field="filter")
    for key, value in flt.items():
        if key in LOGICAL:
            if not isinstance(value, list) or not value:
                raise Invalid(f"{key} takes a non-empty list of filters.", field="filter")
            for part in value:
                validate(part)
        elif key.startswith("$"):
            raise Invalid(f"{key} is not an operator of the filter language (at the top of a filter).", field="filter")
        elif isinstance(value, Mapping):
            if not value:
                raise Invalid(f"The condition on {key!r} is empty.", field="filter")
            for op, operand in value.items():
                _check_operator(key, op, operand)
        elif not _scalar(value):
            raise Invalid(f"The condition on {key!r} must be a string, number or boolean.", field="filter")


def _check_operator(key: str, op: str, operand: Any) -> None:
    if op not in COMPARISONS:
        raise Invalid(f"{op} is not an operator of the filter language (on {key!r}).", field="filter")
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand or not all(_scalar(v) for v in operand):
            raise Invalid(f"{op} on {key!r} takes a non-empty list of strings or numbers.", field="filter")
    elif op in ("$gt", "$gte", "$lt", "$lte"):
        if not _number(operand):
            raise Invalid(f"{op} on {key!r} takes a number.", field="filter")
    elif op == "$exists":
        if not isinstance(operand, bool):
            raise Invalid(f"$exists on {key!r} takes true or false.", field="filter")
    elif not _scalar(operand):
        raise Invalid(f"{op} on {key!r} takes a string, number or boolean.", field="filter")


def matches(flt: Filter | None, metadata: Mapping[str, Any]) -> bool:
    """Whether a vector with `metadata` passes `flt` (None passes everything). Assumes `validate` passed."""
    if not flt:
        return True
    for key, value in flt.items():
        if key == "$and":
            if not all(matches(part, metadata) for part in value):
                return False
        elif key == "$or":
            if not any(matches(part, metadata) for part in value):
                return False
        elif isinstance(value, Mapping):
            present = key in metadata
            stored = metadata.get(key)
            for op, operand in value.items():
                if not _compare(op, operand, present, stored):
                    return False
        elif not _compare("$eq", value, key in metadata, metadata.get(key)):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    # True == 1 in Python; not in a filter.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def _compare(op: str, operand: Any, present: bool, stored: Any) -> bool:
    if op == "$exists":
        return present is bool(operand)
    values = stored if isinstance(stored, list) else [stored] if present else []
    if op == "$eq":
        return any(_same(v, operand) for v in values)
    if op == "$ne":
        return not any(_same(v, operand) for v in values)
    if op == "$in":
        return any(_same(v, o) for v in values for o in operand)
    if op == "$nin":
        return not any(_same(v, o) for v in values for o in operand)
    if not present or not _number(stored):
        return False
    if op == "$gt":
        return bool(stored > operand)
    if op == "$gte":
        return bool(stored >= operand)
    if op == "$lt":
        return bool(stored < operand)
    return bool(stored <= operand)  # $lte
