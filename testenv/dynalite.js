// Starts dynalite (in memory) bound to loopback, answering TransactWriteItems too (transact.js).
// Usage: node dynalite.js <port>
'use strict'
const guard = require('./guard')
const transact = require('./transact')
const port = Number(process.argv[2] || 4568)
const { server, store } = transact.storeOf(require('dynalite'), {
  createTableMs: 0,
  deleteTableMs: 0,
  updateTableMs: 0,
})
transact(server, store)
server.listen(port, '127.0.0.1', () => {
  const a = server.address()
  console.log('dynalite listening at http://%s:%s', a.address, a.port)
})
guard('dynalite')
