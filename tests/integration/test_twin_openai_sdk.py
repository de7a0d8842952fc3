"""A client worldtune did not write: the OpenAI Python SDK's `videos` methods against the twin over loopback.

vLLM-Omni's video routes follow OpenAI's (POST /v1/videos as a multipart form, GET/DELETE /v1/videos/{id},
GET /v1/videos/{id}/content, GET /v1/videos); vLLM-Omni's own fields travel in the SDK's `extra_body`.
"""

from __future__ import annotations

import time

import pytest
from test_twin_http import twin

from worldtune.tools.twin.video import check_mp4

pytestmark = pytest.mark.integration
openai = pytest.importorskip("openai")


def test_create_retrieve_download_list_delete_with_the_openai_sdk() -> None:
    with twin("--time-scale", "200", "--load-time", "0") as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused-by-vllm-omni", max_retries=0, timeout=60)
        created = client.videos.create(
            prompt="A humanoid robot walks through a sunlit warehouse.",
            model="nvidia/Cosmos3-Super",
            size="640x640",
            seconds="1",  # x 24 fps = 24 frames, rounded up by the pipeline to 25
            extra_body={"num_inference_steps": 4, "seed": 17},
        )
        assert created.id.startswith("video_gen_") and created.status == "queued" and created.object == "video"
        job = created
        deadline = time.monotonic() + 60
        while job.status in ("queued", "in_progress"):
            assert time.monotonic() < deadline, job
            time.sleep(0.05)
            job = client.videos.retrieve(created.id)
        assert job.status == "completed" and job.progress == 100 and job.seconds == "1"
        extra = job.model_extra or {}
        assert extra["num_frames"] == 25 and extra["fps"] == 24.0  # vLLM-Omni's fields, taken from the clip
        clip = client.videos.download_content(created.id)
        info = check_mp4(clip.content)
        assert (info.frames, info.width, info.height) == (25, 640, 640)
        listed = client.videos.list()
        assert [v.id for v in listed.data] == [created.id]
        deleted = client.videos.delete(created.id)
        assert deleted.id == created.id and deleted.deleted
        with pytest.raises(openai.NotFoundError):
            client.videos.retrieve(created.id)
        with pytest.raises(openai.BadRequestError, match="quality"):
            client.videos.create(prompt="a robot", extra_body={"quality": "ultra"})
