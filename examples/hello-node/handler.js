// sless example: greets whoever the JSON event names, with one dependency
// (`ms`, vendored under vendor/ as a file: dependency, so the build needs no
// network).
//
//   sless deploy examples/hello-node --name hello-node --runtime nodejs20
//   sless invoke hello-node --data '{"name": "you"}'

const ms = require("ms");

exports.handle = async (event, context) => {
  const name = (event && event.name) || "world";
  console.log(`greeting ${name} (request ${context.request_id})`);
  return {
    message: `Hello, ${name}!`,
    uptime: ms(Math.round(process.uptime() * 1000)),
    time_left: ms(context.getRemainingTimeInMillis(), { long: true }),
  };
};
