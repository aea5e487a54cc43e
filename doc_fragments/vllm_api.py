"""Documentation of the options every module that talks to the running service's OpenAI API shares."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description: Base URL of the head's API (http://host:port), without C(/v1).
    type: str
    required: true
  model:
    description: Served model name.
    type: str
    required: true
  api_key_file:
    description: File holding the API key on the controller; the key is sent as a bearer token, never returned.
    type: path
"""
