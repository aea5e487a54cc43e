"""Attributes every module shares that only reads and judges: it changes nothing, so check mode runs it in full."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs in full in check mode; it changes nothing either way.
    support: full
  diff_mode:
    description: Has nothing to show in diff mode; it changes nothing.
    support: none
"""
