// Starts kinesalite bound to loopback only: its own CLI listens on every interface.
// Usage: node kinesalite.js <port>
'use strict'
const guard = require('./guard')
require('./attimestamp') // before kinesalite loads its actions
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
guard('kinesalite')
