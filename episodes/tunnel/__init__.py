"""How a box reaches the worker's loopback services (the tool bridge, the model proxy).

A box without a network (Docker `network: none`, the local sandbox) gets the services'
Unix sockets bind-mounted in, and `relay` (stdlib-only, run in the box) serves each on
the box's loopback. A box on another machine (Modal, Prime) shares only a process's
stdio with the worker: `stdio` is the worker's end of a tunnel over it, `stdio_relay`
the in-box end (sent as source). The in-box programs import nothing from this package.

Only this docstring here: the image and the runtime bundle ship `relay` (and
`stdio_relay`) with an empty `__init__`.
"""
