// The built-in text the synthetic byte-level tokenizers learn their merges from: some prose,
// some JSON and some code, so common words, keys and punctuation get tokens of their own.

export const TRAINING_TEXT = `Once upon a time there was a little river that ran through a quiet town.
The people of the town loved the river, and every morning they walked along the water to see the
boats go by. One day a small girl named Mia found a key in the sand. She did not know what the key
could open, so she asked her mother, her father and the old man who sold bread by the bridge.
Nobody knew. The key was made of brass and it was warm in her hand, as if it had been waiting for her.
Mia looked for a door all day. She tried the door of the school, the door of the library and the
door of the little red house at the end of the street. None of them opened. In the evening she sat
down by the river and watched the sun go down. Then she saw a small wooden box floating on the water.
She pulled it out, put the key in the lock, and the box opened. Inside there was a letter that said:
"Thank you for finding me. Please take good care of the river, and the river will take care of you."
From that day on, Mia and her friends cleaned the banks of the river every week, and the town was
happier than it had ever been before.

The weather today is sunny with a few clouds in the afternoon. The temperature will be between 18
and 24 degrees, and there is a small chance of rain in the evening. Tomorrow will be cooler, with
wind from the north and temperatures between 12 and 17 degrees.

Questions and answers:
What is the capital of France? The capital of France is Paris.
How many days are there in a week? There are seven days in a week.
What is 12 plus 30? The answer is 42.
Can you help me with my homework? Of course, I would be happy to help you with your homework.

{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
{"id": 1, "title": "The river", "tags": ["story", "water", "town"], "done": false, "score": 0.75}
[{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hello, how can I help you today?"}]

function add(a, b) {
  return a + b;
}
const result = add(1, 2);
console.log("The result is", result);
for (let i = 0; i < 10; i++) {
  if (i % 2 === 0) {
    console.log(i);
  }
}
def greet(name):
    return "Hello, " + name + "!"

print(greet("world"))
`;
