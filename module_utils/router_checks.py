"""What roles/vllm_router refuses before the router host changes (pure; roles/vllm_router/library/vllm_router_check.py
reads the controller's files and calls this)."""

# The routing policies vllm-router has (`--policy`), at the version the role pins.
POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "consistent_hash")


def router_problems(options, found):
    """Every problem with the router's options, one line each naming the option, the value and the rule.
    `options`: policy, version, ca_file, wheelhouse, api_key_file; `found`: whether the wheelhouse is a folder and
    the key file a file on the controller."""
    problems = []
    if options["policy"] not in POLICIES:
        problems.append(
            f"vllm_router_policy={options['policy']}: not one of {', '.join(POLICIES)} (rule: a policy vllm-router "
            f"{options['version']} has)"
        )
    if not options["ca_file"]:
        problems.append(
            "vllm_router_ca_file is empty (rule: the router verifies every replica with the CA their doors are signed "
            "by; its door is signed by it too)"
        )
    if options["wheelhouse"] and not found["wheelhouse"]:
        problems.append(f"vllm_router_wheelhouse={options['wheelhouse']}: no such folder on the controller")
    if options["api_key_file"] and not found["api_key_file"]:
        problems.append(
            f"vllm_router_api_key_file={options['api_key_file']}: no such file on the controller (rule: the "
            "replicas' key, checked at the router's door)"
        )
    return problems
