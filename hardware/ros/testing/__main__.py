"""``python -m hardware.ros.testing``: run the local ROS test graph until Ctrl-C."""

from hardware.ros.testing import main

main()
