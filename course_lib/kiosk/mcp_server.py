"""The kiosk's tools as an MCP server (lesson 12): ``python -m course_lib.kiosk.mcp_server``.

It speaks MCP over its standard input and output, so any MCP client can start it as a
subprocess and use the shop: the four lookups, the refund and the e-mail, each with the
JSON Schema of its arguments (the same pydantic types as in the capstone, patterns
included) and annotations that say what kind of tool it is.

Annotations are the *server's* word about its tools: a client that did not write the
server reads them as hints, never as permission (``course_lib.mcp_tools.needs_approval``).
"""

from __future__ import annotations

from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from course_lib.kiosk.shop import Kiosk
from course_lib.mcp_tools import serveable
from course_lib.tools import parse_docstring

DATA = Path(__file__).parents[2] / "data" / "products.json"

# What each tool does to the world, in MCP's terms. A refund changes an order but is safe to
# repeat (one refund per order, lesson 6); an e-mail cannot be taken back or repeated safely.
ANNOTATIONS = {
    "get_product_stock": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "get_product_info": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "find_products": ToolAnnotations(read_only_hint=True, open_world_hint=False),
    "read_reviews": ToolAnnotations(read_only_hint=True, open_world_hint=True),  # text other people wrote
    "refund_order": ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                    open_world_hint=False),
    "send_email": ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                  open_world_hint=True),
}


def kiosk_server(kiosk: Kiosk, name: str = "kiosk") -> MCPServer:
    """An MCP server whose tools are the kiosk's, described as in the capstone."""
    server = MCPServer(name, log_level="WARNING")  # the SDK's default, INFO, logs every request
    for tool in kiosk.tools().values():
        summary, _ = parse_docstring(tool.__doc__ or "")
        server.add_tool(serveable(tool), description=summary, annotations=ANNOTATIONS[tool.__name__])
    return server


if __name__ == "__main__":
    kiosk_server(Kiosk.load(DATA)).run("stdio")
