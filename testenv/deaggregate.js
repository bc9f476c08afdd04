// Deaggregates Kinesis records as a KPL consumer does, with the reference Node.js deaggregator
// (aws-kinesis-agg), so that kinesub's tests check the aggregates the Publisher writes against
// a reader no one here wrote. Checksums are verified.
// Usage: node deaggregate.js < records.json > users.json
//   in:  [{"partitionKey": "k", "sequenceNumber": "…", "data": "<base64>"}, …] as read from a shard
//   out: [[{"partitionKey": "k", "explicitHashKey": "123" or "", "subSequenceNumber": 0 or -1,
//           "data": "<base64>"}, …], …]   the user records of each input record, in order;
//        a record that is not aggregated is its own user record, with subSequenceNumber -1
'use strict'
const { deaggregateSync } = require('aws-kinesis-agg')

let input = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => { input += chunk })
process.stdin.on('end', () => {
  const out = JSON.parse(input).map((rec) => {
    let users
    deaggregateSync(rec, true, (err, got) => {
      if (err) throw err
      users = got
    })
    return users.map((u) => ({
      partitionKey: u.partitionKey,
      explicitHashKey: u.explicitPartitionKey || '',
      subSequenceNumber: u.subSequenceNumber === undefined ? -1 : u.subSequenceNumber,
      data: u.data,
    }))
  })
  process.stdout.write(JSON.stringify(out))
})
