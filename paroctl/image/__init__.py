"""Images: build, labels, the doctor, the kernel plans compiled into them."""
