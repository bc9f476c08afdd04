// Starts kinesalite bound to loopback only: its own CLI listens on every interface.
// Usage: node kinesalite.js <port>
'use strict'
const port = Number(process.argv[2] || 4567)
const server = require('kinesalite')({
  createStreamMs: 0,
  deleteStreamMs: 0,
  updateStreamMs: 0,
  shardLimit: 1000,
}).listen(port, '127.0.0.1', () => {
  const a = server.address()
  console.log('kinesalite listening at http://%s:%s', a.address, a.port)
})
process.on('SIGTERM', () => process.exit(0))
process.on('SIGINT', () => process.exit(0))
// A client that gives up on a request (a cancelled context, a timeout) closes its connection;
// kinesalite rethrows the request's resulting "aborted" error, which would end the server and
// fail every later call with "connection refused". Survive exactly that; anything else still
// ends the process.
process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    console.error('client aborted a request')
    return
  }
  console.error(err)
  process.exit(1)
})
