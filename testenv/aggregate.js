// Aggregates user records as the Kinesis Producer Library does, with the reference Node.js
// aggregator (aws-kinesis-agg), so that kinesub's tests read aggregates no one here wrote.
// Usage: node aggregate.js < groups.json > aggregates.json
//   in:  [[{"partitionKey": "k", "explicitHashKey": "123" (optional), "data": "<base64>"}, …], …]
//        one array of user records per aggregate
//   out: [{"partitionKey": "k", "explicitHashKey": "123" or "", "data": "<base64>"}, …]
//        one Kinesis record per aggregate, to put as it is
'use strict'
const { RecordAggregator } = require('aws-kinesis-agg')

let input = ''
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => { input += chunk })
process.stdin.on('end', () => {
  const out = JSON.parse(input).map((group) => {
    const agg = new RecordAggregator()
    for (const r of group) {
      const rec = { partitionKey: r.partitionKey, data: Buffer.from(r.data, 'base64') }
      if (r.explicitHashKey) rec.explicitHashKey = r.explicitHashKey
      agg.addUserRecord(rec)
    }
    const enc = agg.build()
    return {
      partitionKey: enc.partitionKey,
      explicitHashKey: enc.ExplicitHashKey || '',
      data: enc.data.toString('base64'),
    }
  })
  process.stdout.write(JSON.stringify(out))
})
