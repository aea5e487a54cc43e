"""playbooks/prepare.yml orders its checks by cost: the image's own checks run once the image is on the nodes and
before the model download, the model's own config is read after it, before any rank starts (deploy.yml)."""

import yaml

from tests.runner import ROOT


def plays():
    return yaml.safe_load((ROOT / "playbooks" / "prepare.yml").read_text())


def index_of(predicate):
    found = [i for i, play in enumerate(plays()) if predicate(play)]
    assert len(found) == 1, found
    return found[0]


def roles(play):
    return [role["role"] if isinstance(role, dict) else role for role in play.get("roles", [])]


def test_the_image_check_runs_after_the_image_and_before_the_download_and_the_model_check_after_it():
    image = index_of(lambda play: "engine_image" in roles(play))
    image_check = index_of(lambda play: "image_check" in play.get("tags", []))
    download = index_of(lambda play: "hf_model" in roles(play))
    model_check = index_of(lambda play: "model_check" in play.get("tags", []))
    assert image < image_check < download < model_check == len(plays()) - 1
