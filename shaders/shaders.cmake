# Shader list: dcp_shader(<symbol> <source> [DEFINES...])
