"""Documentation every module that talks to the running service's OpenAI API shares: its options (the argument
spec is module_utils/openai_client.py's api_argument_spec) and its attributes."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description: Base URL of the head's API (https://host:port of the front door), without C(/v1).
    type: str
    required: true
  model:
    description: Served model name.
    type: str
    required: true
  api_key_file:
    description: File holding the API key on the controller; the key is sent as a bearer token, never returned.
    type: path
  ca_file:
    description:
      - CA certificate (PEM, on the controller) that signed the certificate of an https I(url), the front door's CA
        (roles/front_door). Unset, the system's trust store decides.
    type: path
attributes:
  check_mode:
    description: Can run in check mode; then nothing is sent to the service and the result has C(skipped=true).
    support: full
  diff_mode:
    description: Would show what changed in diff mode; these modules change nothing on the service.
    support: none
"""
