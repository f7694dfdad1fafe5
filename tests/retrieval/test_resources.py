"""template.yaml's retrieval resources agree with the code that uses them, and the pure rules behind them."""

from __future__ import annotations

import json

from oberik.domain.retrieval import INDEX_KINDS, NON_FILTERABLE, chunk_pages, index_name
from oberik.local.retrieval_sources import matches_pattern, stream_sources
from oberik.local.template import load_template


def _resources(kind: str) -> dict[str, dict]:
    return {k: v.get("Properties", {}) for k, v in load_template()["Resources"].items() if v["Type"] == kind}


def test_the_templates_vector_indexes_are_the_ones_the_code_names() -> None:
    indexes = _resources("AWS::S3Vectors::Index")
    names = sorted(p["IndexName"] for p in indexes.values())
    assert names == sorted(index_name(k, "bedrock/amazon.titan-embed-text-v2:0", 1024) for k in INDEX_KINDS)
    for props in indexes.values():
        assert props["Dimension"] == 1024 and props["DistanceMetric"] == "cosine" and props["DataType"] == "float32"
        assert sorted(props["MetadataConfiguration"]["NonFilterableMetadataKeys"]) == sorted(NON_FILTERABLE)
    assert len(_resources("AWS::S3Vectors::VectorBucket")) == 1


def test_new_messages_and_only_they_reach_the_history_function() -> None:
    table = load_template()["Resources"]["Table"]["Properties"]
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    (source,) = stream_sources(load_template())
    assert source["function"] == "HistoryFunction" and source["table"] == "Table"

    def record(event: str, sk: str) -> dict:
        return {"eventName": event, "dynamodb": {"Keys": {"pk": {"S": "SESSION#s_1"}, "sk": {"S": sk}}}}

    admitted = [
        any(matches_pattern(p, record(e, sk)) for p in source["patterns"])
        for e, sk in (
            ("INSERT", "MSG#00000001"),
            ("MODIFY", "MSG#00000001"),
            ("INSERT", "META"),
            ("INSERT", "F#0000000001"),
        )
    ]
    assert admitted == [True, False, False, False]


def test_large_uploads_are_queued_for_the_ingest_function() -> None:
    events = load_template()["Resources"]["IngestFunction"]["Properties"]["Events"]
    (event,) = events.values()
    assert event["Type"] == "SQS" and event["Properties"]["Queue"] == {"Fn::GetAtt": ["DocumentQueue", "Arn"]}
    queue = load_template()["Resources"]["DocumentQueue"]["Properties"]
    assert int(queue["VisibilityTimeout"]) >= 6 * int(
        load_template()["Resources"]["IngestFunction"]["Properties"]["Timeout"]
    )


def test_chunks_keep_their_page_and_overlap_a_little() -> None:
    sentences = " ".join(f"Sentence {i} of page one explains one more detail." for i in range(60))
    chunks = chunk_pages([(1, sentences), (2, "A short second page."), (3, "   ")], size=300, overlap=80)
    assert {c.page for c in chunks} == {1, 2}
    assert [c.n for c in chunks] == list(range(len(chunks)))
    first_page = [c for c in chunks if c.page == 1]
    assert len(first_page) > 5 and all(len(c.text) <= 300 for c in chunks)
    assert first_page[0].text.split(". ")[-1].rstrip(".") in first_page[1].text  # carried over
    assert chunks[-1].text == "A short second page."
    joined = " ".join(c.text for c in first_page)
    assert all(f"Sentence {i} " in joined for i in range(60))


def test_a_stream_filter_the_local_poller_does_not_know_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="does not know"):
        matches_pattern({"eventName": [{"anything-but": ["REMOVE"]}]}, {"eventName": "INSERT"})
    assert json.dumps({"ok": True})
