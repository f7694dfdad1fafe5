"""The SSE decoder on its own: keepalives dropped, a broken-off frame never handed out."""

from __future__ import annotations

from oberik.client.sse import Frame, SseDecoder


def feed(decoder: SseDecoder, text: str) -> list[Frame]:
    frames = [decoder.feed(line) for line in text.split("\n")]
    return [f for f in frames if f is not None]


def test_comments_are_dropped_and_frames_carry_their_ids():
    # Given a body with a keepalive between two frames, and a retry hint at the end
    body = (
        'id: 1\nevent: run\ndata: {"run_id":"r_1"}\n\n'
        ": keepalive\n\n"
        'id: 2\nevent: token\ndata: {"delta":"Hi"}\n\n'
        "retry: 1000\n\n"
    )

    # When it is decoded
    decoder = SseDecoder()
    frames = feed(decoder, body)

    # Then only the frames come out, and the hint and the comment are noted
    assert frames == [Frame("run", {"run_id": "r_1"}, 1), Frame("token", {"delta": "Hi"}, 2)]
    assert decoder.comments == 1 and decoder.retry == 1000


def test_a_frame_cut_off_before_its_blank_line_is_never_returned():
    decoder = SseDecoder()
    assert feed(decoder, 'id: 3\nevent: token\ndata: {"delta":"par') == []
    assert feed(SseDecoder(), 'event: error\ndata: {"code":"stream_expired"}\n\n') == [
        Frame("error", {"code": "stream_expired"}, None)
    ]
