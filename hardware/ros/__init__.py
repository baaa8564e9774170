"""ROS over rosbridge v2 (roslibpy): the link, message validation and :class:`RosRobot`.

``hardware.ros.testing`` starts a local ROS 1 graph (rosmaster, a rospy sim robot node and the
upstream rosbridge_server) to try ``embodied deploy`` without a robot, and for the tests.
"""
