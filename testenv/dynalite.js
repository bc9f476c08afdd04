// Starts dynalite (in memory) bound to loopback.
// Usage: node dynalite.js <port>
'use strict'
const guard = require('./guard')
const port = Number(process.argv[2] || 4568)
const server = require('dynalite')({
  createTableMs: 0,
  deleteTableMs: 0,
  updateTableMs: 0,
}).listen(port, '127.0.0.1', () => {
  const a = server.address()
  console.log('dynalite listening at http://%s:%s', a.address, a.port)
})
guard('dynalite')
