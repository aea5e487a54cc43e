"""Vars plugin: ansible.builtin.host_group_vars, with the file and line of a YAML error kept in its message.

ansible-core 2.19's host_group_vars re-raises a parse error as its bare text ("YAML parsing failed: ..."), which
names neither the file nor the line; an inventory with a typo in group_vars then fails with no hint where.
"""

from ansible.errors import AnsibleParserError
from ansible.plugins.vars.host_group_vars import DOCUMENTATION as BUILTIN_DOCUMENTATION
from ansible.plugins.vars.host_group_vars import VarsModule as HostGroupVars

DOCUMENTATION = BUILTIN_DOCUMENTATION.replace("name: host_group_vars", "name: spark_group_vars", 1).replace(
    "short_description: In charge of loading group_vars and host_vars",
    "short_description: host_group_vars, naming the file and line of a YAML error",
    1,
)


class VarsModule(HostGroupVars):
    def load_found_files(self, loader, data, found_files):
        for found in found_files:
            try:
                data = super().load_found_files(loader, data, [found])
            except Exception as err:  # the builtin's get_vars would flatten any of them to its bare text
                where = where_in_file(getattr(err, "obj", None), found)
                message = getattr(err, "message", None) or str(err)
                raise AnsibleParserError(f"{where}: {message}") from err
        return data


def where_in_file(origin, found):
    """'<file> line L, column C' from the error's origin when it has one, else the file."""
    line, column = getattr(origin, "line_num", None), getattr(origin, "col_num", None)
    path = getattr(origin, "path", None) or found
    return f"{path} line {line}, column {column}" if line else str(path)
