"""The filter language both vector stores evaluate."""

from __future__ import annotations

import pytest

from oberik.domain.errors import Invalid
from oberik.domain.vector_filter import matches, validate

DOC = {"tenant_id": "acme", "tags": ["policies", "hr"], "page": 3, "created_at": 1700000000.5, "kind": "chunk"}


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"tenant_id": "acme"}, True),
        ({"tenant_id": "other"}, False),
        ({"tenant_id": {"$eq": "acme"}}, True),
        ({"tenant_id": {"$ne": "acme"}}, False),
        ({"tenant_id": {"$ne": "other"}}, True),
        ({"kind": {"$in": ["memory", "chunk"]}}, True),
        ({"kind": {"$in": ["memory", "wiki"]}}, False),
        ({"kind": {"$nin": ["memory", "wiki"]}}, True),
        ({"kind": {"$nin": ["chunk"]}}, False),
        ({"page": {"$gt": 2}}, True),
        ({"page": {"$gt": 3}}, False),
        ({"page": {"$gte": 3}}, True),
        ({"page": {"$lt": 3}}, False),
        ({"page": {"$lte": 3}}, True),
        ({"page": {"$gte": 2, "$lt": 4}}, True),
        ({"created_at": {"$gt": 1700000000}}, True),
        ({"subject": {"$exists": False}}, True),
        ({"subject": {"$exists": True}}, False),
        ({"tenant_id": {"$exists": True}}, True),
        ({"$and": [{"tenant_id": "acme"}, {"page": 3}]}, True),
        ({"$and": [{"tenant_id": "acme"}, {"page": 4}]}, False),
        ({"$or": [{"tenant_id": "other"}, {"page": 3}]}, True),
        ({"$or": [{"tenant_id": "other"}, {"page": 4}]}, False),
        ({"tenant_id": "acme", "kind": "memory"}, False),  # two fields: both must hold
        ({"$or": [{"subject": {"$exists": False}}, {"subject": "u1"}]}, True),
    ],
)
def test_each_operator(flt: dict, expected: bool) -> None:
    validate(flt)
    assert matches(flt, DOC) is expected


def test_eq_on_a_list_matches_any_element() -> None:
    assert matches({"tags": "hr"}, DOC)
    assert matches({"tags": {"$eq": "policies"}}, DOC)
    assert not matches({"tags": "finance"}, DOC)
    assert matches({"tags": {"$in": ["finance", "hr"]}}, DOC)
    assert not matches({"tags": {"$in": ["finance", "legal"]}}, DOC)
    assert not matches({"tags": {"$ne": "hr"}}, DOC)
    assert matches({"tags": {"$nin": ["finance"]}}, DOC)
    assert not matches({"tags": {"$nin": ["finance", "hr"]}}, DOC)


def test_a_missing_field_fails_comparisons_but_passes_negations() -> None:
    assert not matches({"subject": "u1"}, DOC)
    assert not matches({"subject": {"$gt": 1}}, DOC)
    assert matches({"subject": {"$ne": "u1"}}, DOC)
    assert matches({"subject": {"$nin": ["u1"]}}, DOC)


def test_types_do_not_blur() -> None:
    assert not matches({"page": "3"}, DOC)
    assert not matches({"flag": 1}, {"flag": True})
    assert matches({"flag": True}, {"flag": True})
    assert matches({"page": 3.0}, DOC)


@pytest.mark.parametrize(
    "flt",
    [
        {},
        {"$not": [{"a": 1}]},
        {"$and": []},
        {"$or": {"a": 1}},
        {"a": {"$regex": "x"}},
        {"a": {"$in": []}},
        {"a": {"$in": "x"}},
        {"a": {"$gt": "3"}},
        {"a": {"$exists": "yes"}},
        {"a": [1, 2]},
        {"a": {}},
    ],
)
def test_what_the_language_does_not_have_is_refused_with_a_sentence(flt: dict) -> None:
    with pytest.raises(Invalid) as e:
        validate(flt)
    assert e.value.field == "filter"
    assert len(str(e.value)) > 10
