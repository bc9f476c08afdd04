package direct

import "flag"

var updateMiddleware = flag.Bool("update-middleware", false, "write testdata/getrecords_middleware.txt from the SDK linked in")
