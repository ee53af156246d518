//! The MCP bridge (Hyperspace spec §10.1 `registerMCPServer`; `docs/bridges.md`): MCP servers'
//! tools served as tools of this node.
