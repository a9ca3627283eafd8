from seq2seq.cli.app import main

main()
