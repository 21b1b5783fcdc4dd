"""Events that cannot be forged by id (issue 38, attack 5): a document naming another request's request_id, rejected
before any claim or in conflict with the holder, is published as that one delivery's rejection, marked so and named by
its Pub/Sub message id, and the request holding the id goes on to its own end."""

from __future__ import annotations

from tests.integration.deployment import fake_node_request
from tests.integration.test_controller_intake import jobs_with_key


def test_documents_naming_another_requests_id_are_published_as_their_own_deliverys_rejections(deployment, job_client):
    events = deployment.events()
    assert (
        deployment.request(fake_node_request("forged-victim-1", "--sleep", "0.5"), message_id="forged-victim-msg")
        == 200
    )
    forgeries = {
        # Invalid: refused by the schema, before its request key is known.
        "attacker-schema": fake_node_request(
            "forged-victim-1", resources={"machine_type": "a2-highgpu-2g", "accelerator_count": 3}
        ),
        # Valid, but breaking a guardrail: refused at admission under the victim's very key.
        "attacker-guardrail": fake_node_request(
            "forged-victim-1", output_dir=f"gs://{deployment.control_bucket}/ledger/"
        ),
        # Valid and admissible, but another spec under the victim's id: a conflict with the holder.
        "attacker-conflict": fake_node_request("forged-victim-1", "--sleep", "9"),
    }
    for message_id, document in forgeries.items():
        assert deployment.request(document, message_id=message_id) == 200

    published = [(e, a) for e, a in events.drain() if e.request_id == "forged-victim-1"]
    rejections = {a["delivery"]: (e, a) for e, a in published if e.state == "rejected"}
    assert set(rejections) == set(forgeries), "each forgery is rejected once, as its own delivery"
    marks = {message_id: a["rejected_delivery"] for message_id, (_, a) in rejections.items()}
    assert marks == {
        "attacker-schema": "unclaimed",
        "attacker-guardrail": "unclaimed",
        "attacker-conflict": "conflicting_delivery",
    }
    for message_id, (event, _) in rejections.items():
        assert (event.delivery, event.rejected_delivery) == (message_id, marks[message_id])
    holders = {a["ce-id"] for e, a in published if e.state != "rejected"}
    assert holders and not holders & {a["ce-id"] for _, a in rejections.values()}

    # The victim's request never heard of them: one job, its own lifecycle to its own end.
    assert len(jobs_with_key(job_client, "request:forged-victim-1")) == 1
    assert deployment.record("request:forged-victim-1")["trigger"]["message_id"] == "forged-victim-msg"
    events.wait_for("forged-victim-1", "succeeded", act=deployment.reconcile)
    own = [e.state for e, _ in events.drain() if e.request_id == "forged-victim-1" and e.state != "rejected"]
    assert own == ["accepted", "submitted", "running", "succeeded"]
