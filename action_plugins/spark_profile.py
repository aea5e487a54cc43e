"""Action plugin: resolve the inventory's deployment profile on the controller and check its shape.

Reads spark_serve_profiles, spark_serve_profile and spark_serve_profile_overrides untemplated from the task
vars, templates them value by value (so an undefined variable is reported with the profile field it sits in,
not as a templating traceback), merges the overrides, validates the result against the JSON Schema, and
lists every problem at once. Values under credential-like names are never echoed.
"""

import json
import os

import ansible.module_utils
import jsonschema
from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# The project's module_utils join the package here, as in action_plugins/vllm_staged_start.py.
ansible.module_utils.__path__.extend(p for p in C.DEFAULT_MODULE_UTILS_PATH if p not in ansible.module_utils.__path__)
from ansible.module_utils.image_recipe import recipe
from ansible.module_utils.redaction import REDACTED, mentions_secret

# Documented in library/spark_profile.py (ansible-doc -M library spark_profile).
ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    schema=dict(type="path", required=True),
    profiles_file=dict(type="str", default="group_vars/all/profiles.yml"),
    images_dir=dict(type="path"),
)

PROFILES_VAR = "spark_serve_profiles"
OVERRIDES_VAR = "spark_serve_profile_overrides"


def merge(base, override):
    """combine(recursive=true): mappings merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def dotted(path):
    return ".".join(str(p) for p in path) or "(profile)"


def schema_problems(profile, schema):
    """Every schema violation as {field, rule, message}; secret-looking values are never shown."""
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(profile), key=lambda e: list(map(str, e.absolute_path))):
        field = dotted(error.absolute_path)
        message = error.message
        if mentions_secret(field) or mentions_secret(error.instance):
            message = f"{REDACTED} fails the schema rule '{error.validator}'"
        problems.append({"field": field, "rule": f"schema {error.validator}", "message": f"{field}: {message}"})
    return problems


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(ARGUMENT_SPEC)
        name, profiles_file = args["name"], args["profiles_file"]
        inventory = task_vars.get("inventory_dir") or "the inventory"
        problems = []
        profiles = self.resolve(task_vars.get(PROFILES_VAR), PROFILES_VAR, profiles_file, problems)
        if not isinstance(profiles, dict):
            return self.failed(
                result,
                problems
                or [
                    f"{PROFILES_VAR} ({profiles_file}) must be a mapping of "
                    f"profile name to profile, got {kind(profiles)}"
                ],
            )
        if name is None or name not in profiles:
            return self.failed(
                result,
                [
                    f"spark_serve_profile={name!r} ({inventory}): must name one of "
                    f"{', '.join(map(str, profiles))} ({profiles_file})"
                ],
            )
        profile = self.resolve(profiles[name], f"{PROFILES_VAR}.{name}", profiles_file, problems)
        overrides = self.resolve(task_vars.get(OVERRIDES_VAR, {}), OVERRIDES_VAR, inventory, problems)
        if not isinstance(profile, dict):
            problems.append(f"{PROFILES_VAR}.{name} ({profiles_file}): must be a mapping, got {kind(profile)}")
        if not isinstance(overrides, dict):
            problems.append(
                f"{OVERRIDES_VAR} ({inventory}): must be a mapping of profile fields, got {kind(overrides)}"
            )
        if problems:
            return self.failed(result, problems)
        resolved = merge(profile, overrides)
        with open(args["schema"], encoding="utf-8") as handle:
            problems = schema_problems(resolved, json.load(handle))
        if problems:
            return self.failed(result, [f"{p['message']} [rule: {p['rule']}]" for p in problems])
        images_dir = args["images_dir"] or os.path.join(os.path.dirname(os.path.dirname(args["schema"])), "images")
        resolved["image"], problems = resolved_image(resolved["image"], images_dir)
        if problems:
            return self.failed(result, problems)
        result.update(changed=False, profile=resolved, ansible_facts={"spark_serve_resolved": resolved})
        result["_ansible_no_log"] = True  # the profile may carry credentials that vllm_args then refuses
        return result

    def resolve(self, value, path, source, problems):
        """Template value by value; an undefined or broken template is reported with its field."""
        if isinstance(value, dict):
            return {key: self.resolve(item, f"{path}.{key}", source, problems) for key, item in value.items()}
        if isinstance(value, list):
            return [self.resolve(item, f"{path}[{i}]", source, problems) for i, item in enumerate(value)]
        try:
            templated = self._templar.template(value)
        except AnsibleError as err:
            problems.append(f"{path} ({source}): cannot be templated: {first_line(err)} [rule: template]")
            return None
        if isinstance(templated, (dict, list)):  # a template that yields a structure: check inside it too
            return self.resolve(templated, path, source, problems)
        return templated

    @staticmethod
    def failed(result, problems):
        result.update(
            failed=True,
            problems=problems,
            msg=f"{len(problems)} problem(s) in the deployment profile; nothing was changed:\n"
            + "\n".join(f"- {line}" for line in problems),
        )
        return result


def resolved_image(image, images_dir):
    """The profile's image with `ref`, what every node runs: name@digest, or the local name of the image built
    from images/<build>/ (tagged by the hash of its inputs) with those inputs, its provenance."""
    if "build" not in image:
        return dict(image, ref=f"{image['name']}@{image['digest']}"), []
    built = recipe(images_dir, image["build"], image.get("base", ""))
    if built["problems"]:
        return image, built["problems"]
    keep = ("build", "base", "ref", "repository", "inputs_sha256", "dockerfile_sha256", "applier_sha256", "patches")
    return {key: built[key] for key in keep}, []


def kind(value):
    """The YAML kind of a value (Ansible tags its strings with subclasses of str)."""
    for plain in (bool, dict, list, str, int, float):
        if isinstance(value, plain):
            return plain.__name__
    return type(value).__name__


def first_line(err):
    text = getattr(err, "message", None) or str(err)
    return str(text).strip().splitlines()[0]
