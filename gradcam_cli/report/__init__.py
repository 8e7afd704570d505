"""`gradcam report`: one HTML page over the records of one or several runs, opened from file:// with no server."""
