"""The one table between the Task Queue's errors and HTTP statuses, read both ways."""

from __future__ import annotations

from glidein_ext.errors import (
    TQ_HTTP_STATUS,
    StaleMasterError,
    TaskQueueAuthError,
    TaskQueueError,
    TaskQueueForbidden,
    TaskQueueNotFound,
    TaskQueueRequestError,
    WorkflowError,
    tq_error_for_status,
    tq_http_status,
)


def test_each_error_round_trips_through_its_status() -> None:
    expected = {
        TaskQueueForbidden: 403,
        TaskQueueAuthError: 401,
        TaskQueueNotFound: 404,
        StaleMasterError: 409,
        TaskQueueRequestError: 422,
    }
    assert dict(TQ_HTTP_STATUS) == expected
    for kind, status in expected.items():
        assert tq_http_status(kind("x")) == status
        assert tq_error_for_status(status) is kind


def test_subclasses_and_the_rest() -> None:
    assert tq_http_status(WorkflowError("bad")) == 422  # a subclass takes its parent's status
    assert tq_http_status(TaskQueueError("down")) == 503
    assert tq_error_for_status(500) is None and tq_error_for_status(413) is None
