"""The admin CLI (``namesrv-admin``): mqadmin's NameServer subcommands and ``compare``,
speaking the remoting protocol to any NameServer, Java's or ours.

- ``client``: a blocking socket client on the project's codec;
- ``commands``: one function per subcommand, answered as a table or JSON;
- ``compare``: snapshots of several NameServers and their differences;
- ``cli``: argument parsing, output and exit codes.
"""
